// Threads that dlopen a library, burn CPU inside it for about a millisecond, and dlclose it,
// in a loop: the library is mapped and unmapped hundreds of times a second.
//
// With PROGRESS, the main thread prints "SECONDS OPERATIONS" every 100 ms (one operation: a
// dlopen, a call, a dlclose).
//
// usage: dlopen LIBRARY [SECONDS] [THREADS] [PROGRESS] [WORK]
//   defaults: until killed, 2 threads, no progress, 1000000 iterations of work per call
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static const char *library;
static double stop_at;
static unsigned long work_per_call = 1000000;
static volatile unsigned long operations;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *loop(void *arg) {
    (void)arg;
    while (stop_at == 0 || now() < stop_at) {
        void *handle = dlopen(library, RTLD_NOW | RTLD_LOCAL);
        if (!handle) {
            fprintf(stderr, "dlopen: %s\n", dlerror());
            exit(1);
        }
        void (*work)(unsigned long) = (void (*)(unsigned long))dlsym(handle, "plugin_work");
        work(work_per_call);
        dlclose(handle);
        __atomic_fetch_add(&operations, 1, __ATOMIC_RELAXED);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    library = argv[1];
    double seconds = argc > 2 ? atof(argv[2]) : 0;
    int threads = argc > 3 ? atoi(argv[3]) : 2;
    int progress = argc > 4 && atoi(argv[4]) != 0;
    if (argc > 5) work_per_call = strtoul(argv[5], NULL, 10);
    double start = now();
    if (seconds > 0) stop_at = start + seconds;
    pthread_t ids[16];
    if (threads > 16) threads = 16;
    for (int i = 0; i < threads; i++) pthread_create(&ids[i], NULL, loop, NULL);
    while (progress && (stop_at == 0 || now() < stop_at)) {
        usleep(100000);
        printf("%.3f %lu\n", now() - start, __atomic_load_n(&operations, __ATOMIC_RELAXED));
        fflush(stdout);
    }
    for (int i = 0; i < threads; i++) pthread_join(ids[i], NULL);
    return 0;
}
