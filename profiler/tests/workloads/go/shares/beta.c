//go:build cgo

// What beta calls in C (cgo.go): a call back into Go, goBeta, which does beta's work.
#include "_cgo_export.h"

unsigned long long callBeta(long long n) { return goBeta(n); }
