// Runs the functions fn_00 .. fn_63 of a library it dlopens: the first half for a second,
// then truncates the library's file to KEEP bytes (the code stays, what follows it, symbols and
// debug information, is cut) and runs the second half for another second. A reader that maps
// the file and reads past the new end dies of SIGBUS.
//
// usage: truncate LIBRARY KEEP
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void run(void (**fns)(unsigned long), int first, int last, double seconds) {
    double stop = now() + seconds;
    for (int i = first; now() < stop; i = i == last ? first : i + 1) fns[i](200000);
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    void *library = dlopen(argv[1], RTLD_NOW);
    if (!library) return 1;
    void (*fns[64])(unsigned long);
    for (int i = 0; i < 64; i++) {
        char name[16];
        snprintf(name, sizeof name, "fn_%02d", i);
        if (!(fns[i] = (void (*)(unsigned long))dlsym(library, name))) return 1;
    }
    run(fns, 0, 31, 1.0);
    if (truncate(argv[1], atol(argv[2])) != 0) return 1;
    run(fns, 32, 63, 1.0);
    // Not through exit(): the dynamic linker would read the library's cut data segment.
    _exit(0);
}
