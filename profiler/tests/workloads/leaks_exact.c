// Leaks exactly 1000 blocks of 4096 bytes from leak_page(), while a second thread allocates
// and frees a churn of other blocks (malloc, calloc, realloc) that all end up freed.
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

void *volatile sink;

__attribute__((noinline)) static void leak_page(void) {
    char *page = malloc(4096);
    memset(page, 0xab, 4096);
    sink = page;  // the last reference, overwritten: a real leak
}

__attribute__((noinline)) static void churn(void) {
    for (int i = 0; i < 20000; i++) {
        char *a = malloc(16 + i % 512);
        char *b = calloc(4, 8 + i % 64);
        a = realloc(a, 1024 + i % 2048);
        sink = a;
        free(b);
        free(a);
    }
}

static void *churner(void *arg) {
    (void)arg;
    churn();
    return NULL;
}

int main(void) {
    pthread_t thread;
    pthread_create(&thread, NULL, churner, NULL);
    for (int i = 0; i < 1000; i++) {
        leak_page();
        void *kept = malloc(100);
        free(kept);
    }
    pthread_join(thread, NULL);
    return 0;
}
