// Package goroutine holds what the executor reads of the running
// goroutine outside the Go API: an identity, a number that no other live
// goroutine has at the same time, so that state can be kept per
// goroutine (the executor's table of the tasks its goroutines run)
// without a context to carry it, and its profiler labels (ProfLabels).
// Each is kept because it buys more than 10 ns per task: carried in a
// context, a task would cost every Do a context.WithValue (an
// allocation) and every Checkpoint a lookup up the ctx it is given
// (BenchmarkIdentity* in the executor's package).
//
// Where the gc toolchain keeps the running goroutine's g in a register
// or the thread-local slot (386, amd64, arm, arm64, loong64, mips,
// mips64, ppc64, riscv64, s390x, with their endian variants), the
// identity is the address of that g, read in assembly: one load, about
// a nanosecond with the call. A g structure never moves (the garbage
// collector does not move heap objects; stacks move, g does not) and
// lives as long as its goroutine, so the address is constant for a
// goroutine's life; after the goroutine exits the runtime may give the
// same structure to a new goroutine, so an identity is unique among live
// goroutines only. Elsewhere (wasm, gccgo) it is the goroutine's ID
// parsed from the first line of runtime.Stack, about a microsecond.
package goroutine

import (
	"runtime"
	"strconv"
)

// ID returns the calling goroutine's identity: never 0, equal for every
// call on one goroutine, and different from every other live goroutine's.
func ID() uintptr { return id() }

// stackID is ID's portable form: the goroutine's ID from the header of
// its stack trace ("goroutine 42 [running]:"), parsed without an
// allocation.
func stackID() uintptr {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	const prefix = "goroutine "
	if len(b) <= len(prefix) || string(b[:len(prefix)]) != prefix {
		panic("goroutine: unexpected stack header " + strconv.Quote(string(b)))
	}
	var id uintptr
	for _, c := range b[len(prefix):] {
		if c < '0' || c > '9' {
			break
		}
		id = id*10 + uintptr(c-'0')
	}
	if id == 0 {
		panic("goroutine: unexpected stack header " + strconv.Quote(string(b)))
	}
	return id
}
