// A process with MAPPINGS distinct mappings (pages of alternating protections, so that none
// merge) that starts short-lived children sharing its address space (clone with CLONE_VM, as
// posix_spawn and vfork do), each exiting at once, for SECONDS. Prints "ready" once its mappings
// are made, and the number of children started at the end.
//
// usage: clone_vm SECONDS MAPPINGS
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int child(void *arg) {
    (void)arg;
    return 0;
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 4;
    long mappings = argc > 2 ? atol(argv[2]) : 30000;
    long page = sysconf(_SC_PAGESIZE);
    char *area = mmap(NULL, mappings * page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (area == MAP_FAILED) return 1;
    for (long i = 0; i < mappings; i += 2) {
        if (mprotect(area + i * page, page, PROT_READ | PROT_EXEC) != 0) return 1;
    }
    printf("ready\n");
    fflush(stdout);
    static char stack[64 * 1024];
    long children = 0;
    double stop_at = now() + seconds;
    while (now() < stop_at) {
        pid_t pid = clone(child, stack + sizeof stack, CLONE_VM | CLONE_VFORK | SIGCHLD, NULL);
        if (pid < 0) return 1;
        waitpid(pid, NULL, 0);
        children++;
    }
    printf("%ld\n", children);
    return 0;
}
