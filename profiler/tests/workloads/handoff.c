// A server-like hand-off: two threads pass a token back and forth over a pair of pipes and do a
// few microseconds of work each time they hold it (a request handed from an I/O thread to a
// worker and back). Both run on CPU 0 (or CPU; anywhere with -1), so every hand-off is a
// context switch there and no idle CPU has to be woken. Prints hand-offs per second of its own
// loop, so that a profiler's start-up and tear-down do not count; then lingers for LINGER
// seconds (a tool may read its maps then).
//
// usage: handoff SECONDS WORK_NS [LINGER [CPU]]
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static int to_worker[2], to_server[2];
static long work_ns;
static volatile int done;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

// Busy for about work_ns: the request's own work.
__attribute__((noinline)) static void work(void) {
    struct timespec start, t;
    clock_gettime(CLOCK_MONOTONIC, &start);
    do
        clock_gettime(CLOCK_MONOTONIC, &t);
    while ((t.tv_sec - start.tv_sec) * 1000000000L + (t.tv_nsec - start.tv_nsec) < work_ns);
}

// Blocks until the token arrives; 0 once the other side has gone.
__attribute__((noinline)) static int wait_for_token(int from) {
    char token;
    return read(from, &token, 1) == 1;
}

__attribute__((noinline)) static void hand_over(int to) {
    char token = 1;
    if (write(to, &token, 1) != 1)
        exit(1);
}

__attribute__((noinline)) static void *worker(void *arg) {
    (void)arg;
    while (wait_for_token(to_worker[0])) {
        work();
        hand_over(to_server[1]);
    }
    return NULL;
}

__attribute__((noinline)) static long serve(double seconds) {
    long handoffs = 0;
    double end = now() + seconds;
    while (now() < end) {
        for (int i = 0; i < 100; i++) {
            work();
            hand_over(to_worker[1]);
            if (!wait_for_token(to_server[0]))
                exit(1);
        }
        handoffs += 200;
    }
    return handoffs;
}

static void on_cpu(int cpu) {
    if (cpu < 0)
        return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set))
        exit(1);
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 5;
    work_ns = argc > 2 ? atol(argv[2]) : 2000;
    unsigned linger = argc > 3 ? atoi(argv[3]) : 0;
    on_cpu(argc > 4 ? atoi(argv[4]) : 0);
    if (pipe(to_worker) || pipe(to_server))
        return 1;
    pthread_t thread;
    if (pthread_create(&thread, NULL, worker, NULL))
        return 1;
    double start = now();
    long handoffs = serve(seconds);
    double elapsed = now() - start;
    close(to_worker[1]);
    pthread_join(thread, NULL);
    printf("%.0f hand-offs/s\n", handoffs / elapsed);
    fflush(stdout);
    sleep(linger);
    return 0;
}
