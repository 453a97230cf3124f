// A process that holds its own memory's lock for as long as a FUSE daemon holds one of its
// reads: a thread reads its own memory through /proc/self/mem at a page of HOLD, a file whose
// daemon holds every read, and that read holds the lock for reading; another thread then maps
// memory and waits to hold it for writing, and from then on everyone else who would read it
// waits too (/proc/PID/map_files, cmdline, pagemap). Its main thread loads LIBRARY (a plugin.c)
// first, prints "ready" once the lock is held so, and runs the library's plugin_work for SECONDS.
//
// usage: wedged SECONDS LIBRARY HOLD
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static char *held_page;

static void *read_held_page(void *unused) {
    (void)unused;
    int mem = open("/proc/self/mem", O_RDONLY);
    char byte;
    if (mem >= 0) pread(mem, &byte, 1, (off_t)(unsigned long)held_page);
    return NULL;
}

static void *map_memory(void *unused) {
    (void)unused;
    usleep(300000);
    mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 4) return 2;
    void *library = dlopen(argv[2], RTLD_NOW);
    void (*work)(unsigned long) = library ? (void (*)(unsigned long))dlsym(library, "plugin_work") : NULL;
    int hold = open(argv[3], O_RDONLY);
    held_page = hold < 0 ? MAP_FAILED : mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, hold, 0);
    if (!work || held_page == MAP_FAILED) return 3;
    // Both threads made first: making one maps its stack. From here on, nothing maps memory
    // (nor allocates, nor prints through stdio), nor faults in a page of a file, which would
    // wait as the mapper does: the loop's code and the clock's are run once first.
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    work(1000);
    pthread_t reader, mapper;
    pthread_create(&mapper, NULL, map_memory, NULL);
    pthread_create(&reader, NULL, read_held_page, NULL);
    usleep(600000);
    if (write(1, "ready\n", 6) != 6) return 4;
    clock_gettime(CLOCK_MONOTONIC, &start);
    do {
        work(1000000);
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while (now.tv_sec - start.tv_sec < atol(argv[1]));
    return 0;
}
