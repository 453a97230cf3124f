// dlopens every library named on its command line and calls plugin_work() of each in turn,
// for SECONDS.
//
// usage: many_libs SECONDS LIBRARY...
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    double stop = now() + atof(argv[1]);
    int count = argc - 2;
    void (**work)(unsigned long) = calloc(count, sizeof *work);
    for (int i = 0; i < count; i++) {
        void *library = dlopen(argv[i + 2], RTLD_NOW | RTLD_LOCAL);
        if (!library) {
            fprintf(stderr, "dlopen: %s\n", dlerror());
            return 1;
        }
        work[i] = (void (*)(unsigned long))dlsym(library, "plugin_work");
    }
    for (int i = 0; now() < stop; i = (i + 1) % count) work[i](100000);
    return 0;
}
