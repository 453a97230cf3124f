// A process that maps many files, then runs for SECONDS:
//   files DIR COUNT SECONDS   COUNT files of a page of code each, DIR/python-N.so (named like an
//                             interpreter, that a reader of runtimes looks at), each mapped
//                             executable, and runs each in turn: its samples land in every one
//   links DIR COUNT SECONDS   COUNT hard links to one file, each under a path of about 4000
//                             bytes, each mapped (a /proc/PID/maps of COUNT × 4 KB); spins in its
//                             own code
//   forks DIR COUNT SECONDS   the same links, then forks children, 32 alive at a time, each
//                             spinning 2 ms then sleeping 50 ms five times: a fork storm, each
//                             child with the whole table, and few of them running at once
// Prints "ready" once everything is mapped.
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *map_file(const char *path) {
    int fd = open(path, O_RDONLY);
    void *mapped = fd < 0 ? MAP_FAILED : mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0);
    if (mapped == MAP_FAILED) {
        perror(path);
        exit(1);
    }
    close(fd);
    return mapped;
}

// A page whose start is a function: `mov $20000, %ecx; 1: dec %ecx; jnz 1b; ret`.
static void make_file(const char *path) {
    static char page[4096] = {0xb9, 0x20, 0x4e, 0x00, 0x00, (char)0xff, (char)0xc9, 0x75, (char)0xfc, (char)0xc3};
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || write(fd, page, sizeof page) != sizeof page) {
        perror(path);
        exit(1);
    }
    close(fd);
}

NOINLINE static void spin_in_flood(double seconds) {
    volatile unsigned long x = 0;
    for (double stop = now() + seconds; now() < stop;)
        for (int i = 0; i < 100000; i++) x += i;
}

// COUNT hard links to one file of DIR, each under a path of about 4000 bytes, each mapped.
static void map_links(const char *dir, int count) {
    static char path[4096];
    char target[512];
    snprintf(target, sizeof target, "%s/target", dir);
    make_file(target);
    // 18 directories of 200 bytes: links at about 3700 bytes of path, named 200 bytes more.
    int len = snprintf(path, sizeof path, "%s", dir);
    for (int level = 0; level < 18; level++) {
        path[len++] = '/';
        memset(path + len, 'd', 200);
        len += 200;
        path[len] = 0;
        if (mkdir(path, 0755) != 0) {
            perror("mkdir");
            exit(1);
        }
    }
    for (int i = 0; i < count; i++) {
        snprintf(path + len, sizeof path - len, "/%0190d", i);
        if (link(target, path) != 0) {
            perror("link");
            exit(1);
        }
        map_file(path);
    }
}

int main(int argc, char **argv) {
    if (argc != 5) return 2;
    const char *dir = argv[2];
    int count = atoi(argv[3]);
    double seconds = atof(argv[4]);
    if (strcmp(argv[1], "files") == 0) {
        static char path[4096];
        void (**code)(void) = calloc(count, sizeof *code);
        for (int i = 0; i < count; i++) {
            snprintf(path, sizeof path, "%s/python-%d.so", dir, i);
            make_file(path);
            code[i] = (void (*)(void))map_file(path);
        }
        printf("ready\n");
        fflush(stdout);
        for (double stop = now() + seconds; now() < stop;)
            for (int i = 0; i < count; i++) code[i]();
        return 0;
    }
    map_links(dir, count);
    printf("ready\n");
    fflush(stdout);
    if (strcmp(argv[1], "forks") != 0) {
        spin_in_flood(seconds);
        return 0;
    }
    int running = 0;
    for (double stop = now() + seconds; now() < stop;) {
        if (running == 32 && waitpid(-1, NULL, 0) > 0) running--;
        pid_t child = fork();
        if (child == 0) {
            for (int round = 0; round < 5; round++) {
                spin_in_flood(0.002);
                usleep(50000);
            }
            _exit(0);
        }
        if (child < 0) return 1;
        running++;
    }
    while (wait(NULL) > 0) {}
    return 0;
}
