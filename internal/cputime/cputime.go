// Package cputime reads the CPU time the calling process has used: user
// plus system time of all its threads, the Go runtime and GC included.
package cputime

import "time"

// Process returns the calling process's CPU time (getrusage(2)
// RUSAGE_SELF, ru_utime + ru_stime, on Unix systems; GetProcessTimes on
// Windows), and false where it cannot be read (or on other systems:
// js/wasm, wasip1, plan9).
func Process() (time.Duration, bool) { return process() }

// Thread returns the CPU time the calling OS thread has used
// (clock_gettime(2) CLOCK_THREAD_CPUTIME_ID: user and system time, cgo
// calls included), and false where it cannot be read (systems other than
// Linux). A goroutine's reading is its own only while it is locked to its
// thread (runtime.LockOSThread): the runtime may run it on another thread
// otherwise, and other goroutines on this one.
func Thread() (time.Duration, bool) { return thread() }

// TID returns the calling OS thread's ID (gettid(2) on Linux; 0
// elsewhere): two readings on one goroutine that differ say it moved
// between threads.
func TID() int { return tid() }
