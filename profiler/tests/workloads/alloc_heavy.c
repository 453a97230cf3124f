// A malloc-heavy program for `cargo xtask bench`: `alloc_heavy MODE N`.
// - tight: N malloc/free pairs and nothing else, the worst case for any allocation tracker;
// - work: N short strings built, hashed into a table and freed, about a microsecond of work
//   per allocation, like a parser or a request handler.
// Prints the seconds its own loop took, so that start-up and tear-down of a tool do not count.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BUCKETS 4096

struct entry { struct entry *next; char *key; unsigned long count; };

void *volatile sink;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static unsigned long hash(const char *s) {
    unsigned long h = 5381;
    while (*s) h = h * 33 + (unsigned char)*s++;
    return h;
}

static void tight(long n) {
    for (long i = 0; i < n; i++) {
        sink = malloc(16 + i % 256);
        free(sink);
    }
}

static void work(long n) {
    static struct entry *table[BUCKETS];
    char word[64];
    for (long i = 0; i < n; i++) {
        snprintf(word, sizeof word, "key-%ld-%ld", (i * 7919) % 20000, i % 13);
        unsigned long h = hash(word) % BUCKETS;
        struct entry *e = table[h];
        while (e && strcmp(e->key, word) != 0) e = e->next;
        if (!e) {
            e = malloc(sizeof *e);
            *e = (struct entry){table[h], strdup(word), 0};
            table[h] = e;
        }
        e->count++;
        char *copy = strdup(word);  // a temporary, as string handling makes them
        sink = copy;
        free(copy);
    }
    for (int b = 0; b < BUCKETS; b++)
        for (struct entry *e = table[b], *next; e; e = next) {
            next = e->next;
            free(e->key);
            free(e);
        }
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s tight|work N\n", argv[0]);
        return 2;
    }
    long n = atol(argv[2]);
    double start = now();
    if (strcmp(argv[1], "tight") == 0) tight(n); else work(n);
    printf("%.6f\n", now() - start);
    return 0;
}
