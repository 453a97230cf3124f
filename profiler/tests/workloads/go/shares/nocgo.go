//go:build !cgo

package main

//go:noinline
func beta(n int) uint64 { return spin(3 * n) }
