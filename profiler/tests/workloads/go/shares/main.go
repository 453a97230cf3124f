// Three functions doing 60%, 30% and 10% of the work, on two goroutines (main's and one it
// starts), until SECONDS (os.Args[1]) have passed; the work itself (spin) is inlined into each.
// How much work varies from round to round (about 1 ms), so that no sampling period can fall in
// step with the rounds.
// Built stripped and not, PIE and not, by each Go the tests run; built with cgo, beta's work is
// done in C and in a call back from C, which beta calls (cgo.go, beta.c). With PROGRESS=1, prints
// "SECONDS ROUNDS" every 100 ms (the benchmarks read the program's own speed from it).
package main

import (
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"sync/atomic"
	"time"
)

var sink, rounds uint64

func spin(n int) uint64 {
	x := uint64(n)
	for i := 0; i < n; i++ {
		x = x*6364136223846793005 + 1442695040888963407
	}
	return x
}

//go:noinline
func alpha(n int) uint64 { return spin(6 * n) }

//go:noinline
func gamma(n int) uint64 { return spin(n) }

func work(until time.Time) {
	for time.Now().Before(until) {
		unit := 50_000 + rand.Intn(100_000)
		sink += alpha(unit) + beta(unit) + gamma(unit)
		atomic.AddUint64(&rounds, 1)
	}
}

func main() {
	seconds, err := strconv.ParseFloat(os.Args[1], 64)
	if err != nil {
		panic(err)
	}
	start := time.Now()
	until := start.Add(time.Duration(seconds * float64(time.Second)))
	if os.Getenv("PROGRESS") == "1" {
		go func() {
			for range time.Tick(100 * time.Millisecond) {
				fmt.Printf("%.3f %d\n", time.Since(start).Seconds(), atomic.LoadUint64(&rounds))
			}
		}()
	}
	done := make(chan struct{})
	go func() {
		work(until)
		close(done)
	}()
	work(until)
	<-done
}
