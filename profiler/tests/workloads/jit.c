// A tiny "JIT": copies a busy loop into anonymous executable memory, describes it in
// /tmp/perf-PID.map as a JIT runtime would, and runs it. With --no-map it writes no map but
// prints "ADDRESS SIZE" of its code (hex) on a line, for a test to plant a map of its own.
// With --map-at-exit it writes its map as it exits, and leaves it (as the JVM's
// -XX:+DumpPerfMapAtExit does). With --memfd its code is in a memfd, written through one
// mapping and run through another (as .NET's "doublemapper" does).
//
// usage: jit [SECONDS] [--no-map | --map-at-exit | --memfd]   (0 or absent: until killed)
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

// mov rcx, 10000000; 1: dec rcx; jne 1b; ret
static const unsigned char code[] = {0x48, 0xc7, 0xc1, 0x80, 0x96, 0x98, 0x00, 0x48, 0xff, 0xc9, 0x75, 0xfb, 0xc3};

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int write_map(const char *path, const unsigned char *fn, size_t size) {
    FILE *map = fopen(path, "w");
    if (!map) return 1;
    fprintf(map, "%lx %zx jit_spin\n", (unsigned long)fn, size);
    return fclose(map) == 0 ? 0 : 1;
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 0;
    int no_map = argc > 2 && strcmp(argv[2], "--no-map") == 0;
    int map_at_exit = argc > 2 && strcmp(argv[2], "--map-at-exit") == 0;
    int in_memfd = argc > 2 && strcmp(argv[2], "--memfd") == 0;
    unsigned char *mem, *writable;
    if (in_memfd) {
        int fd = memfd_create("doublemapper", MFD_CLOEXEC);
        if (fd < 0 || ftruncate(fd, 4096) != 0) return 1;
        writable = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        mem = mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_SHARED, fd, 0);
    } else {
        mem = writable = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    }
    if (mem == MAP_FAILED || writable == MAP_FAILED) return 1;
    // Somewhere inside the page, as JIT code would be.
    memcpy(writable + 256, code, sizeof code);
    unsigned char *fn = mem + 256;
    char path[64];
    snprintf(path, sizeof path, "/tmp/perf-%d.map", getpid());
    if (no_map) {
        printf("%lx %zx\n", (unsigned long)fn, sizeof code);
        fflush(stdout);
    } else if (!map_at_exit && write_map(path, fn, sizeof code) != 0) {
        return 1;
    }
    double stop = now() + seconds;
    while (seconds <= 0 || now() < stop) ((void (*)(void))fn)();
    if (map_at_exit) return write_map(path, fn, sizeof code);
    if (!no_map) unlink(path);
    return 0;
}
