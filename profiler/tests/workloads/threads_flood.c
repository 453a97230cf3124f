// COUNT threads that sleep and wake for SECONDS, each leaving the CPU again and again: as many
// threads as a user likes, off the CPU. Prints "ready" once they all run.
//
// usage: threads_flood COUNT SECONDS
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static double stop_at;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *sleeper(void *arg) {
    (void)arg;
    while (now() < stop_at) usleep(200000);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    int count = atoi(argv[1]);
    stop_at = now() + atof(argv[2]);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 << 10);
    pthread_t *threads = calloc(count, sizeof *threads);
    for (int i = 0; i < count; i++) {
        if (pthread_create(&threads[i], &attr, sleeper, NULL) != 0) {
            perror("pthread_create");
            return 1;
        }
    }
    printf("ready\n");
    fflush(stdout);
    for (int i = 0; i < count; i++) pthread_join(threads[i], NULL);
    return 0;
}
