// Work under two sets of pprof labels, 60% and 40% of it (loop counts), on main's goroutine and
// one it starts, until SECONDS (os.Args[1]) have passed: pprof.Do with {request=a, worker=w1},
// then with {request=b, path=<a value longer than the profiler keeps>}, in turn.
package main

import (
	"context"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"
)

var sink uint64

//go:noinline
func spin(n int) uint64 {
	x := uint64(n)
	for i := 0; i < n; i++ {
		x = x*6364136223846793005 + 1442695040888963407
	}
	return x
}

func work(until time.Time) {
	first := pprof.Labels("request", "a", "worker", "w1")
	second := pprof.Labels("request", "b", "path", "/"+strings.Repeat("long/", 20))
	ctx := context.Background()
	for time.Now().Before(until) {
		pprof.Do(ctx, first, func(context.Context) { sink += spin(600_000) })
		pprof.Do(ctx, second, func(context.Context) { sink += spin(400_000) })
	}
}

func main() {
	seconds, err := strconv.ParseFloat(os.Args[1], 64)
	if err != nil {
		panic(err)
	}
	until := time.Now().Add(time.Duration(seconds * float64(time.Second)))
	done := make(chan struct{})
	go func() {
		work(until)
		close(done)
	}()
	work(until)
	<-done
}
