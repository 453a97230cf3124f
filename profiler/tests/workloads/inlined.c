/* A loop whose body is a function inlined into it, for naming inlined frames from DWARF: `spin`
 * calls `step` (always inlined) for the number of seconds given as its argument. */
#include <stdlib.h>
#include <time.h>

static inline __attribute__((always_inline)) unsigned long step(unsigned long x) {
    for (int i = 0; i < 1000; i++) {
        x = x * 6364136223846793005UL + 1442695040888963407UL;
        __asm__ volatile("" : "+r"(x));
    }
    return x;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) unsigned long spin(double seconds) {
    unsigned long x = 1;
    double end = now() + seconds;
    while (now() < end) {
        for (int i = 0; i < 1000; i++) {
            x = step(x);
        }
    }
    return x;
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 2;
    return spin(seconds) == 42;
}
