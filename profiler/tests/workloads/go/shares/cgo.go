//go:build cgo

// Built with cgo on, the program is linked by the C toolchain, as a Go program calling C is
// (external linking: its table is placed as the system's linker places it), and beta's work is
// done in C and in Go called back from C: beta calls C's callBeta (beta.c), which does a third
// of it and calls goBeta for the rest. Its samples cross from the goroutine's stack to the
// thread's, and back.
package main

/*
unsigned long long callBeta(long long n);
*/
import "C"

//go:noinline
func beta(n int) uint64 { return uint64(C.callBeta(C.longlong(n))) }

//export goBeta
func goBeta(n C.longlong) C.ulonglong { return C.ulonglong(spin(2 * int(n))) }
