/* A process that poses as a V8 process costly to walk: it maps the binary NODE (V8's, found as
 * such by what it exports) once whole and COUNT more times a page of it, executable, then runs
 * DEPTH frames deep in anonymous code (as V8's JIT code is) whose every frame keeps a frame
 * pointer and, below it, slots that read as a JavaScript frame's (a context, a function), on a
 * thread of its own, for SECONDS. Prints "ready" once it runs.
 *
 * usage: v8_maps NODE COUNT DEPTH SECONDS */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* f(depth): push %rbp; mov %rsp,%rbp; push $0x11 (a context's tag); push $0x21 (a function's);
 * dec %rdi; jz spin; call f; leave; ret; spin: jmp spin */
static const unsigned char code[] = {
    0x55, 0x48, 0x89, 0xe5, 0x6a, 0x11, 0x6a, 0x21, 0x48, 0xff, 0xcf, 0x74, 0x07,
    0xe8, 0xee, 0xff, 0xff, 0xff, 0xc9, 0xc3, 0xeb, 0xfe,
};

static long depth;

static void *run(void *entry) {
    ((void (*)(long))entry)(depth);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 5) return 2;
    int fd = open(argv[1], O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 ||
        mmap(NULL, st.st_size, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0) == MAP_FAILED) {
        perror(argv[1]);
        return 1;
    }
    for (long i = 0, count = atol(argv[2]); i < count; i++) {
        if (mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0) == MAP_FAILED) {
            perror("mmap");
            return 1;
        }
    }
    void *jit = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (jit == MAP_FAILED) return 1;
    memcpy(jit, code, sizeof code);
    depth = atol(argv[3]);
    pthread_t thread;
    if (pthread_create(&thread, NULL, run, jit) != 0) return 1;
    printf("ready\n");
    fflush(stdout);
    sleep(atoi(argv[4]));
    return 0;
}
