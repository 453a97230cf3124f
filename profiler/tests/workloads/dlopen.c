// Threads that dlopen a library, burn CPU inside it for about a millisecond, and dlclose it,
// in a loop: the library is mapped and unmapped hundreds of times a second.
//
// usage: dlopen LIBRARY [SECONDS] [THREADS]   (defaults: until killed, 2 threads)
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static const char *library;
static double stop_at;

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
        work(1000000);
        dlclose(handle);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    library = argv[1];
    double seconds = argc > 2 ? atof(argv[2]) : 0;
    int threads = argc > 3 ? atoi(argv[3]) : 2;
    if (seconds > 0) stop_at = now() + seconds;
    pthread_t ids[16];
    if (threads > 16) threads = 16;
    for (int i = 0; i < threads; i++) pthread_create(&ids[i], NULL, loop, NULL);
    for (int i = 0; i < threads; i++) pthread_join(ids[i], NULL);
    return 0;
}
