// A library whose hot function is named INNER (a static function: the name changes no code,
// only the symbol and debug information), built twice by tests/hostile.rs: once for a container,
// once for the host, at the same path.
#define NOINLINE __attribute__((noinline))

static volatile unsigned long sink;

NOINLINE static void INNER(unsigned long n) {
    unsigned long x = sink;
    for (unsigned long i = 0; i < n; i++) {
        x = x * 6364136223846793005UL + 1442695040888963407UL;
        __asm__ volatile("" : "+r"(x));
    }
    sink = x;
}

NOINLINE void work(unsigned long n) {
    INNER(n);
    __asm__ volatile("" ::: "memory");
}
