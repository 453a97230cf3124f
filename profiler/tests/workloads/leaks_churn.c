// Eight threads churn malloc, calloc, realloc, posix_memalign and aligned_alloc, freeing every
// block, while the main thread leaks exactly 1000 blocks of 4096 bytes through
// main -> do_work -> leaky_function, spread over the run.
//
// Given a file, it starts once that file exists: a test attaching with `leaks -p` creates it once
// the profiler says it is tracking, so that every block is seen from the first (the breakpoint at
// malloc's first byte does not tell: a return probe puts it there before the entry's program is
// attached). It gives up after 30 s.
//
// usage: leaks_churn [SECONDS [START_FILE]]   (default 3 s, at once)
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define THREADS 8
#define LEAKS 1000

static atomic_int stop;
void *volatile sink;

static void *churn(void *arg) {
    unsigned seed = (unsigned)(long)arg;
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        size_t size = 16 + rand_r(&seed) % 1024;
        char *a = malloc(size);
        char *b = calloc(4, size / 4);
        a = realloc(a, size * 2);
        void *c = NULL;
        if (posix_memalign(&c, 64, size) != 0) abort();
        void *d = aligned_alloc(256, 1024);
        sink = b;
        free(a);
        free(b);
        free(c);
        free(d);
    }
    return NULL;
}

__attribute__((noinline)) static void leaky_function(void) {
    char *page = malloc(4096);
    memset(page, 0x5a, 4096);
    sink = page;  // the last reference, overwritten: a real leak
}

__attribute__((noinline)) static void do_work(int i) {
    leaky_function();
    sink = (void *)(long)i;
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 3;
    for (int waited = 0; argc > 2 && access(argv[2], F_OK) != 0; waited++) {
        if (waited == 3000) {
            fprintf(stderr, "leaks_churn: %s never appeared\n", argv[2]);
            return 2;
        }
        usleep(10000);
    }
    pthread_t threads[THREADS];
    for (long i = 0; i < THREADS; i++) pthread_create(&threads[i], NULL, churn, (void *)(i + 1));
    struct timespec pause = {0, (long)(seconds * 1e9 / LEAKS)};
    for (int i = 0; i < LEAKS; i++) {
        do_work(i);
        nanosleep(&pause, NULL);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < THREADS; i++) pthread_join(threads[i], NULL);
    return 0;
}
