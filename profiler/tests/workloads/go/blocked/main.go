// Goroutines off the CPU for SECONDS (os.Args[1]): one blocked in a read(2) of a pipe nobody
// writes to (its thread waits in the kernel), one waiting on a channel nobody sends on (parked by
// Go's scheduler, its thread given to others), and main asleep.
package main

import (
	"os"
	"strconv"
	"syscall"
	"time"
)

//go:noinline
func reader(fd int) {
	buf := make([]byte, 1)
	syscall.Read(fd, buf)
}

//go:noinline
func waiter(never chan int) {
	<-never
}

func main() {
	seconds, err := strconv.ParseFloat(os.Args[1], 64)
	if err != nil {
		panic(err)
	}
	var fds [2]int
	if err := syscall.Pipe(fds[:]); err != nil {
		panic(err)
	}
	go reader(fds[0])
	go waiter(make(chan int))
	time.Sleep(time.Duration(seconds * float64(time.Second)))
}
