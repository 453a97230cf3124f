// Forks N children that exit at once, one after another, then a last child that burns CPU in
// last_child_work() for SECONDS: more children than the kernel's table of followed processes
// holds (8192), unless exited ones leave it.
//
// usage: forks N SECONDS
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

NOINLINE static void last_child_work(double seconds) {
    double stop = now() + seconds;
    volatile unsigned long x = 0;
    while (now() < stop)
        for (int i = 0; i < 100000; i++) x += i;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 9000;
    double seconds = argc > 2 ? atof(argv[2]) : 1;
    for (int i = 0; i < n; i++) {
        pid_t child = fork();
        if (child == 0) _exit(0);
        waitpid(child, NULL, 0);
    }
    pid_t last = fork();
    if (last == 0) {
        last_child_work(seconds);
        _exit(0);
    }
    waitpid(last, NULL, 0);
    return 0;
}
