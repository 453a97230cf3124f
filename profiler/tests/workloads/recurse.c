// Deep stacks: main -> descend x200 -> spin, each descend frame about 100 bytes, so about
// 20 KiB of stack sits above the hot leaf.
//
// With PROGRESS=1, reports completed descents (see progress.h).
//
// usage: recurse [SECONDS] [DEPTH]   (defaults: until killed, 200)
#include <stdlib.h>
#include <time.h>

#include "progress.h"

#define NOINLINE __attribute__((noinline))
#define BARRIER() __asm__ volatile("" ::: "memory")

static volatile unsigned long sink;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

NOINLINE void spin(void) {
    unsigned long x = sink;
    for (unsigned long i = 0; i < 1000000UL; i++) {
        x = x * 6364136223846793005UL + 1442695040888963407UL;
        __asm__ volatile("" : "+r"(x));
    }
    sink = x;
    BARRIER();
}

NOINLINE void descend(int depth) {
    volatile char frame[80];
    frame[0] = (char)depth;
    if (depth > 1) descend(depth - 1);
    else spin();
    // Using the frame after the call keeps the recursion from becoming a loop.
    sink += frame[0];
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 0;
    int depth = argc > 2 ? atoi(argv[2]) : 200;
    double stop = now() + seconds;
    progress_start();
    while (seconds <= 0 || now() < stop) {
        descend(depth);
        progress_add(1);
    }
    BARRIER();
    return 0;
}
