//go:build cgo

// What beta calls in C (cgo.go): a third of beta's work done in C, then a call back into Go,
// goBeta, which does the rest. spin's loop, in C.
#include "_cgo_export.h"

__attribute__((noinline)) static unsigned long long spinInC(long long n) {
    unsigned long long x = (unsigned long long)n;
    for (long long i = 0; i < n; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    }
    return x;
}

unsigned long long callBeta(long long n) { return spinInC(n) + goBeta(n); }
