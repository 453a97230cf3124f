// Opt-in progress report for the benchmarks: with PROGRESS=1 in the environment, a thread prints
// "SECONDS OPERATIONS" every 100 ms, where OPERATIONS is what the workload counts with
// progress_add(). Without it, nothing is printed and progress_add() is one relaxed atomic add.
#ifndef PROGRESS_H
#define PROGRESS_H
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static unsigned long progress_operations;

static inline void progress_add(unsigned long n) { __atomic_fetch_add(&progress_operations, n, __ATOMIC_RELAXED); }

static double progress_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *progress_report(void *start) {
    double t0 = *(double *)start;
    for (;;) {
        usleep(100000);
        printf("%.3f %lu\n", progress_now() - t0, __atomic_load_n(&progress_operations, __ATOMIC_RELAXED));
        fflush(stdout);
    }
    return NULL;
}

static void progress_start(void) {
    static double start;
    const char *enabled = getenv("PROGRESS");
    if (!enabled || enabled[0] != '1') return;
    start = progress_now();
    pthread_t thread;
    pthread_create(&thread, NULL, progress_report, &start);
    pthread_detach(thread);
}
#endif
