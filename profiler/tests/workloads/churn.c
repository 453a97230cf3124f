// What a busy host does all day, for a long-run profiler: a storm of short processes (fork and
// exec of /bin/true), a library loaded and unloaded in a loop, threads created and joined, all at
// once, for SECONDS.
//
// usage: churn SECONDS LIBRARY
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double stop_at;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *forks(void *arg) {
    (void)arg;
    while (now() < stop_at) {
        pid_t child = fork();
        if (child == 0) {
            execl("/bin/true", "true", (char *)NULL);
            _exit(127);
        }
        waitpid(child, NULL, 0);
    }
    return NULL;
}

static void *dlopens(void *library) {
    while (now() < stop_at) {
        void *handle = dlopen(library, RTLD_NOW | RTLD_LOCAL);
        if (!handle) exit(1);
        ((void (*)(unsigned long))dlsym(handle, "plugin_work"))(100000);
        dlclose(handle);
    }
    return NULL;
}

static void *short_thread(void *arg) {
    volatile unsigned long x = (unsigned long)arg;
    for (int i = 0; i < 100000; i++) x += i;
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    stop_at = now() + atof(argv[1]);
    pthread_t forker, loader;
    pthread_create(&forker, NULL, forks, NULL);
    pthread_create(&loader, NULL, dlopens, argv[2]);
    for (unsigned long i = 0; now() < stop_at; i++) {
        pthread_t thread;
        pthread_create(&thread, NULL, short_thread, (void *)i);
        pthread_join(thread, NULL);
    }
    pthread_join(forker, NULL);
    pthread_join(loader, NULL);
    return 0;
}
