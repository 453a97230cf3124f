// Threads that wait in known ways, each in its own call chain (thread function -> X_outer ->
// X_middle -> X_inner -> the wait), each measuring its own blocked time:
//   sleeper  nanosleep in 10 ms steps
//   reader   reads a pipe that the writer thread writes every 20 ms
//   waiter   locks a mutex that the holder thread keeps about half of the time
//   burner   burns CPU, never blocks
// At exit the program prints a line per thread: NAME TID BLOCKED_NS LIFETIME_NS RUN_NS WAIT_NS,
// the last two from /proc/self/task/TID/schedstat (time on a CPU, time runnable waiting for one).
//
// usage: off_cpu [SECONDS]   (default 3)
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))
// Keeps a call out of tail position, so every function keeps its own frame.
#define BARRIER() __asm__ volatile("" ::: "memory")

static double stop_at;
static int pipe_fds[2];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static volatile unsigned long sink;

struct report {
    const char *name;
    pid_t tid;
    long long blocked_ns;
    long long lifetime_ns;
    long long run_ns;
    long long wait_ns;
};

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int running(void) { return now_ns() < stop_at; }

NOINLINE static void spin_ns(long long ns) {
    long long until = now_ns() + ns;
    while (now_ns() < until) sink++;
}

// Each wait is timed by its thread.
#define TIMED(blocked, call)             \
    do {                                 \
        long long started = now_ns();    \
        call;                            \
        *(blocked) += now_ns() - started; \
    } while (0)

NOINLINE static void sleep_inner(long long *blocked) {
    struct timespec step = {0, 10 * 1000 * 1000};
    TIMED(blocked, nanosleep(&step, NULL));
    BARRIER();
}
NOINLINE static void sleep_middle(long long *blocked) { sleep_inner(blocked); BARRIER(); }
NOINLINE static void sleep_outer(long long *blocked) { sleep_middle(blocked); BARRIER(); }

NOINLINE static void read_inner(long long *blocked) {
    char byte;
    TIMED(blocked, if (read(pipe_fds[0], &byte, 1) != 1) abort());
    BARRIER();
}
NOINLINE static void read_middle(long long *blocked) { read_inner(blocked); BARRIER(); }
NOINLINE static void read_outer(long long *blocked) { read_middle(blocked); BARRIER(); }

NOINLINE static void lock_inner(long long *blocked) {
    TIMED(blocked, pthread_mutex_lock(&lock));
    pthread_mutex_unlock(&lock);
    BARRIER();
}
NOINLINE static void lock_middle(long long *blocked) { lock_inner(blocked); BARRIER(); }
NOINLINE static void lock_outer(long long *blocked) { lock_middle(blocked); BARRIER(); }

NOINLINE static void burn_inner(void) { spin_ns(1000 * 1000); BARRIER(); }
NOINLINE static void burn_middle(void) { burn_inner(); BARRIER(); }
NOINLINE static void burn_outer(void) { burn_middle(); BARRIER(); }

// The thread's own numbers, read before it exits: its lifetime, and from the kernel's
// schedstat its time on a CPU and runnable waiting for one.
static void finish(struct report *report, long long started) {
    report->tid = gettid();
    report->lifetime_ns = now_ns() - started;
    char path[64], text[128] = "0 0 0";
    snprintf(path, sizeof path, "/proc/self/task/%d/schedstat", report->tid);
    FILE *file = fopen(path, "r");
    if (file != NULL) {
        if (fgets(text, sizeof text, file) == NULL) strcpy(text, "0 0 0");
        fclose(file);
    }
    sscanf(text, "%lld %lld", &report->run_ns, &report->wait_ns);
}

NOINLINE static void *sleeper(void *arg) {
    struct report *report = arg;
    long long started = now_ns();
    while (running()) sleep_outer(&report->blocked_ns);
    finish(report, started);
    return NULL;
}

NOINLINE static void *reader(void *arg) {
    struct report *report = arg;
    long long started = now_ns();
    while (running()) read_outer(&report->blocked_ns);
    finish(report, started);
    return NULL;
}

NOINLINE static void *writer(void *arg) {
    struct report *report = arg;
    long long started = now_ns();
    struct timespec step = {0, 20 * 1000 * 1000};
    while (running()) {
        TIMED(&report->blocked_ns, nanosleep(&step, NULL));
        if (write(pipe_fds[1], "x", 1) != 1) abort();
    }
    // One more byte, written once the end has passed: a reader that found the program still
    // running before its last read gets it, then finds the end. (Written only inside the loop,
    // the last byte could come before the end, and the reader block for good on a next read.)
    if (write(pipe_fds[1], "x", 1) != 1) abort();
    finish(report, started);
    return NULL;
}

NOINLINE static void *waiter(void *arg) {
    struct report *report = arg;
    long long started = now_ns();
    while (running()) {
        lock_outer(&report->blocked_ns);
        spin_ns(100 * 1000);
    }
    finish(report, started);
    return NULL;
}

NOINLINE static void *holder(void *arg) {
    struct report *report = arg;
    long long started = now_ns();
    while (running()) {
        pthread_mutex_lock(&lock);
        spin_ns(5 * 1000 * 1000);
        pthread_mutex_unlock(&lock);
        spin_ns(5 * 1000 * 1000);
    }
    finish(report, started);
    return NULL;
}

NOINLINE static void *burner(void *arg) {
    struct report *report = arg;
    long long started = now_ns();
    while (running()) burn_outer();
    finish(report, started);
    return NULL;
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 3;
    stop_at = now_ns() + seconds * 1e9;
    if (pipe(pipe_fds) != 0) return 1;
    void *(*functions[])(void *) = {sleeper, reader, writer, waiter, holder, burner};
    struct report reports[] = {{"sleeper"}, {"reader"}, {"writer"}, {"waiter"}, {"holder"}, {"burner"}};
    enum { THREADS = sizeof reports / sizeof reports[0] };
    pthread_t threads[THREADS];
    for (int i = 0; i < THREADS; i++) pthread_create(&threads[i], NULL, functions[i], &reports[i]);
    for (int i = 0; i < THREADS; i++) {
        pthread_join(threads[i], NULL);
        const struct report *r = &reports[i];
        printf("%s %d %lld %lld %lld %lld\n", r->name, r->tid, r->blocked_ns, r->lifetime_ns, r->run_ns, r->wait_ns);
    }
    return 0;
}
