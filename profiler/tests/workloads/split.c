// CPU burner with a known profile: hot_a, hot_b and hot_c get 60%, 30% and 10% of the CPU time,
// each at the end of its own call chain  main|worker -> burn -> run_round -> x_outer -> x_middle ->
// x_inner -> hot_x.
//
// Built with -DFRAMED_LEAVES, each leaf makes a call after its loop: GCC then gives it a frame
// (with -fno-omit-frame-pointer; GCC 12 ignores -mno-omit-leaf-frame-pointer), so the frame-
// pointer chain is whole. Without it the leaves are true leaves, frameless whatever the flags.
//
// With PROGRESS=1, reports completed rounds (see progress.h).
//
// usage: split [SECONDS] [THREADS] [DELAY_MS] [A B C]
//   SECONDS   run time; 0 or absent = until killed
//   THREADS   0 or absent = burn in the main thread; N = burn in N new threads
//   DELAY_MS  wait this long before starting to burn (threads start after it)
//   A B C     work units of hot_a, hot_b, hot_c per round (default 6 3 1: 60/30/10)
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "progress.h"

#define NOINLINE __attribute__((noinline))
// Keeps a call out of tail position, so every function keeps its own frame.
#define BARRIER() __asm__ volatile("" ::: "memory")

static volatile unsigned long sink;
static double stop_at;
static unsigned long units_a = 6, units_b = 3, units_c = 1;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

#ifdef FRAMED_LEAVES
NOINLINE void leaf_done(void) { BARRIER(); }
#define AFTER_LOOP() do { leaf_done(); BARRIER(); } while (0)
#else
#define AFTER_LOOP() BARRIER()
#endif

// The same work per unit in every leaf, so CPU time follows the unit counts.
#define UNIT 100000UL
#define LEAF(name)                                                  \
    NOINLINE void name(unsigned long units) {                       \
        unsigned long x = sink;                                     \
        for (unsigned long i = 0; i < units * UNIT; i++) {          \
            x = x * 6364136223846793005UL + 1442695040888963407UL;  \
            __asm__ volatile("" : "+r"(x));                         \
        }                                                           \
        sink = x;                                                   \
        AFTER_LOOP();                                               \
    }
LEAF(hot_a)
LEAF(hot_b)
LEAF(hot_c)

#define CHAIN(prefix, leaf)                                                          \
    NOINLINE void prefix##_inner(unsigned long u) { leaf(u); BARRIER(); }            \
    NOINLINE void prefix##_middle(unsigned long u) { prefix##_inner(u); BARRIER(); } \
    NOINLINE void prefix##_outer(unsigned long u) { prefix##_middle(u); BARRIER(); }
CHAIN(a, hot_a)
CHAIN(b, hot_b)
CHAIN(c, hot_c)

NOINLINE void run_round(void) {
    a_outer(units_a);
    b_outer(units_b);
    c_outer(units_c);
    progress_add(1);
    BARRIER();
}

NOINLINE void burn(void) {
    while (stop_at == 0 || now() < stop_at) run_round();
    BARRIER();
}

NOINLINE void *worker(void *arg) {
    (void)arg;
    burn();
    BARRIER();
    return NULL;
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 0;
    int threads = argc > 2 ? atoi(argv[2]) : 0;
    int delay_ms = argc > 3 ? atoi(argv[3]) : 0;
    if (argc > 6) {
        units_a = strtoul(argv[4], NULL, 10);
        units_b = strtoul(argv[5], NULL, 10);
        units_c = strtoul(argv[6], NULL, 10);
    }
    progress_start();
    if (delay_ms > 0) usleep(delay_ms * 1000);
    if (seconds > 0) stop_at = now() + seconds;
    if (threads == 0) {
        burn();
        BARRIER();
        return 0;
    }
    pthread_t ids[64];
    if (threads > 64) threads = 64;
    for (int i = 0; i < threads; i++) pthread_create(&ids[i], NULL, worker, NULL);
    for (int i = 0; i < threads; i++) pthread_join(ids[i], NULL);
    return 0;
}
