//go:build cgo

// Built with cgo on, this file links the program with the C toolchain, as a Go program calling C
// is (external linking: its table is placed as the system's linker places it); it calls C once,
// at start-up, off the work measured.
package main

/*
static int answer(void) { return 42; }
*/
import "C"

var answer = int(C.answer())
