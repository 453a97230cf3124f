// 200 threads each allocate 3000 blocks of 1-256 bytes, hold them across a pause, then free
// them all: nothing leaks. (glibc's mtrace reports false leaks here: it is not thread-safe.)
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#define THREADS 200
#define BLOCKS 3000

static pthread_barrier_t held;

__attribute__((noinline)) static void *hold_block(unsigned *seed) {
    return malloc(1 + rand_r(seed) % 256);
}

static void *worker(void *arg) {
    unsigned seed = (unsigned)(long)arg;
    void **blocks = malloc(BLOCKS * sizeof *blocks);
    for (int i = 0; i < BLOCKS; i++) blocks[i] = hold_block(&seed);
    pthread_barrier_wait(&held);
    pthread_barrier_wait(&held);
    for (int i = 0; i < BLOCKS; i++) free(blocks[i]);
    free(blocks);
    return NULL;
}

int main(void) {
    pthread_t threads[THREADS];
    pthread_barrier_init(&held, NULL, THREADS + 1);
    for (long i = 0; i < THREADS; i++) pthread_create(&threads[i], NULL, worker, (void *)(i + 1));
    pthread_barrier_wait(&held);
    usleep(200 * 1000);  // every block outstanding at once
    pthread_barrier_wait(&held);
    for (int i = 0; i < THREADS; i++) pthread_join(threads[i], NULL);
    return 0;
}
