// Calls clock_gettime in a loop: the time goes to the vDSO.
//
// usage: clock [SECONDS]   (0 or absent: until killed)
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 0;
    struct timespec start, ts;
    clock_gettime(CLOCK_MONOTONIC, &start);
    do {
        clock_gettime(CLOCK_MONOTONIC, &ts);
    } while (seconds <= 0 || (ts.tv_sec - start.tv_sec) + (ts.tv_nsec - start.tv_nsec) / 1e9 < seconds);
    return 0;
}
