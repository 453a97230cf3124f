/* A program that poses as CPython 3.12 to a profiler reading it from outside: it exports
 * _PyRuntime, PyCode_Type, PyUnicode_Type, PyUnicode_AsUTF8 and Py_Version as python3.12 does,
 * and fills the runtime with what a hostile or broken target could: with no argument, a thread
 * list that loops on itself; with "frames", a thread state for the calling thread whose current
 * frame is its own caller (an endless frame chain) running a "code object" whose names are made
 * of folded-format separators and terminal escapes; with "names-in FILE", the same frames, the
 * names of whose code object are in a page of FILE mapped and never touched (a reader's fault
 * there goes to FILE's file system); with "names-racing FILE", the same frames, the names in a
 * page of memory that it maps over, again and again, with a page of FILE never touched, and back
 * (a reader that found the page present may then fault into FILE's file system), and its frame
 * running a different one of many copies of the code object each time, which a reader has not
 * read yet. It then spins in a function
 * named like the eval loop for argv's seconds. Built with -rdynamic so the symbols are
 * exported. */
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/mman.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

char _PyRuntime[4096];
char PyCode_Type[512];
char PyUnicode_Type[512];
const uint32_t Py_Version = 0x030c01f0;
const char *PyUnicode_AsUTF8(void *unicode) { return unicode ? "" : 0; }

static char interp[8192], tstate[512], cframe[64], frame[128], code[256], name[64], no_lines[64];

static void put(char *base, size_t offset, const void *value) { memcpy(base + offset, &value, 8); }

/* With "names-racing": the page the names are in, the file mapped over it in turns, and the
 * copies of the code object. */
static char *racing_page;
static int racing_fd = -1;
#define CODES 65536
static char codes[CODES][256];

static void setup(int with_frames, const char *names_in) {
    put(_PyRuntime, 48, interp);          /* interpreters.main */
    if (!with_frames) {
        put(interp, 72, _PyRuntime);      /* threads.head: the runtime itself, whose "next" ... */
        put(_PyRuntime, 8, _PyRuntime);   /* ... is itself: a cycle, and no thread_id matches */
        return;
    }
    put(interp, 72, tstate);
    put(tstate, 136, (void *)pthread_self()); /* thread_id: this thread */
    put(tstate, 56, cframe);                  /* cframe, whose current_frame ... */
    put(cframe, 0, frame);
    put(frame, 0, code);                      /* f_code */
    put(frame, 8, frame);                     /* previous: itself, an endless chain */
    frame[70] = 0;                            /* owner: the thread */
    put(code, 8, PyCode_Type);                /* ob_type */
    uint32_t first_line = 7;
    memcpy(code + 68, &first_line, 4);
    /* co_name, co_qualname and co_filename: a compact ASCII str of hostile bytes; co_linetable:
     * an empty bytes object. */
    const char *text = "a;b\n\x1b[2J";
    uint64_t length = strlen(text);
    put(name, 8, PyUnicode_Type);             /* ob_type */
    memcpy(name + 16, &length, 8);
    uint32_t state = (1u << 2) | (1u << 5) | (1u << 6);
    memcpy(name + 32, &state, 4);
    memcpy(name + 40, text, length);
    put(code, 120, name);
    put(code, 128, name);
    put(code, 112, name);
    put(code, 136, no_lines);
    if (names_in) {
        int fd = open(names_in, O_RDONLY);
        char *file = fd < 0 ? MAP_FAILED : mmap(NULL, 1 << 20, PROT_READ, MAP_PRIVATE, fd, 0);
        if (file == MAP_FAILED) exit(3);
        /* Not touched: the names' page is not present in memory. */
        put(code, 120, file + 4096);
        put(code, 128, file + 4096);
        put(code, 112, file + 4096);
    }
}

/* The names' page racing: the file's page mapped over it, then memory holding the names again. */
static void race(void) {
    static uint32_t next;
    put(frame, 0, codes[next++ % CODES]);
    mmap(racing_page, 4096, PROT_READ, MAP_PRIVATE | MAP_FIXED, racing_fd, 4096);
    mmap(racing_page, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    memcpy(racing_page, name, sizeof name);
}

static void start_racing(const char *file) {
    racing_fd = open(file, O_RDONLY);
    racing_page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (racing_fd < 0 || racing_page == MAP_FAILED) exit(3);
    memcpy(racing_page, name, sizeof name);
    put(code, 120, racing_page);
    put(code, 128, racing_page);
    put(code, 112, racing_page);
    for (int i = 0; i < CODES; i++) memcpy(codes[i], code, sizeof code);
}

__attribute__((noinline)) void _PyEval_EvalFrameDefault(double seconds) {
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    volatile uint64_t x = 0;
    do {
        if (racing_fd >= 0)
            for (int i = 0; i < 100; i++) race();
        else
            for (int i = 0; i < 100000; i++) x += i;
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while ((now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) / 1e9 < seconds);
}

int main(int argc, char **argv) {
    int names_in = argc > 3 && strcmp(argv[2], "names-in") == 0;
    int racing = argc > 3 && strcmp(argv[2], "names-racing") == 0;
    setup(argc > 2 && (strcmp(argv[2], "frames") == 0 || names_in || racing), names_in ? argv[3] : NULL);
    if (racing) start_racing(argv[3]);
    _PyEval_EvalFrameDefault(argc > 1 ? atof(argv[1]) : 2.0);
    return 0;
}
