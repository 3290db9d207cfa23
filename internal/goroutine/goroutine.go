// Package goroutine gives the running goroutine an identity: a number
// that no other live goroutine has at the same time, so that state can
// be kept per goroutine (the executor's table of the tasks its
// goroutines run) without a context to carry it.
//
// On amd64 and arm64 the identity is the address of the runtime's g
// structure of the goroutine, read from the thread-local slot (amd64) or
// the g register (arm64) where the runtime keeps it: one load, about a
// nanosecond. A g structure never moves (the garbage collector does not
// move heap objects; stacks move, g does not) and lives as long as its
// goroutine, so the address is constant for a goroutine's life; after
// the goroutine exits the runtime may give the same structure to a new
// goroutine, so an identity is unique among live goroutines only. On
// other architectures it is the goroutine's ID parsed from the first
// line of runtime.Stack (about a microsecond).
package goroutine

import (
	"runtime"
	"strconv"
)

// ID returns the calling goroutine's identity: never 0, equal for every
// call on one goroutine, and different from every other live goroutine's.
func ID() uintptr { return id() }

// stackID is ID's portable form: the goroutine's ID from the header of
// its stack trace ("goroutine 42 [running]:").
func stackID() uintptr {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	const prefix = "goroutine "
	if len(b) <= len(prefix) {
		panic("goroutine: unexpected stack header " + strconv.Quote(string(b)))
	}
	b = b[len(prefix):]
	n := 0
	for n < len(b) && b[n] >= '0' && b[n] <= '9' {
		n++
	}
	v, err := strconv.ParseUint(string(b[:n]), 10, 64)
	if err != nil || v == 0 {
		panic("goroutine: unexpected stack header " + strconv.Quote(string(buf[:])))
	}
	return uintptr(v)
}
