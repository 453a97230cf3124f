// Calls work() of libwork.so in a loop for SECONDS (the container of tests/hostile.rs).
//
// usage: app SECONDS
#include <stdlib.h>
#include <time.h>

void work(unsigned long n);

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    double stop = now() + (argc > 1 ? atof(argv[1]) : 1);
    while (now() < stop) work(1000000);
    return 0;
}
