// Calls spin (nested_dwarf.S) until argv[1] seconds (default 2) have passed.
#include <stdlib.h>
#include <time.h>

void spin(void);

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    double end = now() + (argc > 1 ? atof(argv[1]) : 2);
    while (now() < end) spin();
    return 0;
}
