// Four threads allocate with every allocation function, free and reallocate at random, and
// print what they still hold at exit, by the function that allocated it:
// `site_<function> <blocks> <bytes>` (bytes as requested).
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

enum site { MALLOC, CALLOC, REALLOC, REALLOCARRAY, POSIX_MEMALIGN, ALIGNED_ALLOC, MEMALIGN, VALLOC, SITES };
static const char *names[SITES] = {"site_malloc", "site_calloc", "site_realloc", "site_reallocarray",
                                   "site_posix_memalign", "site_aligned_alloc", "site_memalign", "site_valloc"};

#define THREADS 4
#define SLOTS 512
#define STEPS 20000

struct block { void *ptr; size_t size; enum site site; };
static struct block slots[THREADS][SLOTS];

__attribute__((noinline)) static void *site_malloc(size_t n) { return malloc(n); }
__attribute__((noinline)) static void *site_calloc(size_t n) { return calloc(n, 3); }
__attribute__((noinline)) static void *site_realloc(void *p, size_t n) { return realloc(p, n); }
__attribute__((noinline)) static void *site_reallocarray(void *p, size_t n) { return reallocarray(p, n, 2); }
__attribute__((noinline)) static void *site_posix_memalign(size_t n) {
    void *p = NULL;
    return posix_memalign(&p, 64, n) == 0 ? p : NULL;
}
__attribute__((noinline)) static void *site_aligned_alloc(size_t n) { return aligned_alloc(256, n * 256); }
__attribute__((noinline)) static void *site_memalign(size_t n) { return memalign(128, n); }
__attribute__((noinline)) static void *site_valloc(size_t n) { return valloc(n); }

static void *worker(void *arg) {
    long t = (long)arg;
    unsigned seed = (unsigned)t + 1;
    struct block *mine = slots[t];
    for (int step = 0; step < STEPS; step++) {
        struct block *b = &mine[rand_r(&seed) % SLOTS];
        size_t n = 1 + rand_r(&seed) % 300;
        enum site site = rand_r(&seed) % SITES;
        if (b->ptr && (site == REALLOC || site == REALLOCARRAY)) {
            // Grow or shrink in place or move: the block is now the reallocation's.
            void *p = site == REALLOC ? site_realloc(b->ptr, n) : site_reallocarray(b->ptr, n);
            if (p) *b = (struct block){p, site == REALLOC ? n : n * 2, site};
            continue;
        }
        if (b->ptr) {
            if (rand_r(&seed) % 8 == 0) {
                // realloc to 0 frees the block.
                site_realloc(b->ptr, 0);
            } else {
                free(b->ptr);
            }
            b->ptr = NULL;
            continue;
        }
        void *p = NULL;
        size_t size = n;
        switch (site) {
        case MALLOC: p = site_malloc(n); break;
        case CALLOC: p = site_calloc(n); size = n * 3; break;
        case REALLOC: p = site_realloc(NULL, n); break;  // realloc(NULL, n) is malloc(n)
        case REALLOCARRAY: p = site_reallocarray(NULL, n); size = n * 2; break;
        case POSIX_MEMALIGN: p = site_posix_memalign(n); break;
        case ALIGNED_ALLOC: p = site_aligned_alloc(n % 4 + 1); size = (n % 4 + 1) * 256; break;
        case MEMALIGN: p = site_memalign(n); break;
        case VALLOC: p = site_valloc(n); break;
        default: break;
        }
        if (p) *b = (struct block){p, size, site};
    }
    return NULL;
}

int main(void) {
    pthread_t threads[THREADS];
    for (long t = 0; t < THREADS; t++) pthread_create(&threads[t], NULL, worker, (void *)t);
    for (int t = 0; t < THREADS; t++) pthread_join(threads[t], NULL);
    unsigned long blocks[SITES] = {0}, bytes[SITES] = {0};
    for (int t = 0; t < THREADS; t++)
        for (int i = 0; i < SLOTS; i++)
            if (slots[t][i].ptr) {
                blocks[slots[t][i].site]++;
                bytes[slots[t][i].site] += slots[t][i].size;
            }
    for (int s = 0; s < SITES; s++) printf("%s %lu %lu\n", names[s], blocks[s], bytes[s]);
    return 0;
}
