// Package cputime reads the CPU time the calling process has used: user
// plus system time of all its threads, the Go runtime and GC included.
package cputime

import "time"

// Process returns the calling process's CPU time (getrusage(2)
// RUSAGE_SELF, ru_utime + ru_stime, on Unix systems; GetProcessTimes on
// Windows), and false where it cannot be read (or on other systems:
// js/wasm, wasip1, plan9).
func Process() (time.Duration, bool) { return process() }
