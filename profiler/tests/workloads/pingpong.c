// Two processes bouncing one byte over a pair of pipes: every round trip is two blocking reads,
// so the run is nothing but context switches. Both run on CPU 0, so that a round trip is two
// switches there and no idle CPU has to be woken (whose latency would swamp the rest). Prints
// round trips per second of its own loop, so that a profiler's start-up and tear-down do not
// count; then both processes linger for LINGER seconds (a tool may read their maps then).
//
// usage: pingpong SECONDS [LINGER]
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

// Blocks until the peer's byte arrives; 0 once the peer has gone.
__attribute__((noinline)) static int wait_for_peer(int from) {
    char byte;
    return read(from, &byte, 1) == 1;
}

__attribute__((noinline)) static void pass_to_peer(int to) {
    char byte = 1;
    if (write(to, &byte, 1) != 1)
        exit(1);
}

__attribute__((noinline)) static void answer(int from, int to) {
    while (wait_for_peer(from))
        pass_to_peer(to);
}

__attribute__((noinline)) static long serve(int from, int to, double seconds) {
    long trips = 0;
    double end = now() + seconds;
    while (now() < end) {
        for (int i = 0; i < 100; i++) {
            pass_to_peer(to);
            if (!wait_for_peer(from))
                exit(1);
        }
        trips += 100;
    }
    return trips;
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 5;
    unsigned linger = argc > 2 ? atoi(argv[2]) : 0;
    cpu_set_t cpu0;
    CPU_ZERO(&cpu0);
    CPU_SET(0, &cpu0);
    if (sched_setaffinity(0, sizeof cpu0, &cpu0))
        return 1;
    int there[2], back[2];
    if (pipe(there) || pipe(back))
        return 1;
    pid_t child = fork();
    if (child == 0) {
        close(there[1]);
        close(back[0]);
        answer(there[0], back[1]);
        sleep(linger);
        return 0;
    }
    close(there[0]);
    close(back[1]);
    double start = now();
    long trips = serve(back[0], there[1], seconds);
    double elapsed = now() - start;
    close(there[1]);
    waitpid(child, NULL, 0);
    printf("%.0f round trips/s\n", trips / elapsed);
    fflush(stdout);
    sleep(linger);
    return 0;
}
