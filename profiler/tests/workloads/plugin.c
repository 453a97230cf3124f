// A shared library that burns CPU, loaded and unloaded in a loop by dlopen.c.
#define NOINLINE __attribute__((noinline))

static volatile unsigned long sink;

NOINLINE void plugin_spin(unsigned long n) {
    unsigned long x = sink;
    for (unsigned long i = 0; i < n; i++) {
        x = x * 6364136223846793005UL + 1442695040888963407UL;
        __asm__ volatile("" : "+r"(x));
    }
    sink = x;
    __asm__ volatile("" ::: "memory");
}

NOINLINE void plugin_work(unsigned long n) {
    plugin_spin(n);
    __asm__ volatile("" ::: "memory");
}
