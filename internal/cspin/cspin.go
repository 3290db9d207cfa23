//go:build cgo

// Package cspin burns CPU in C, through cgo: a task that cannot call
// Checkpoint and holds its thread until it returns, as an image or an
// inference library's call does. For tests and measurements of the
// executor's pacing under a CPU quota. Without cgo it spins in Go.
package cspin

/*
#include <stdint.h>
#include <time.h>

static uint64_t cspin_thread_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

// cspin runs until the calling thread has used ns of CPU, and returns a
// value of its arithmetic so that it is not optimised away.
static uint64_t cspin(uint64_t ns) {
	uint64_t end = cspin_thread_ns() + ns, x = 1;
	for (;;) {
		for (int i = 0; i < 4096; i++) {
			x = x * 6364136223846793005ull + 1442695040888963407ull;
		}
		if (cspin_thread_ns() >= end) {
			return x;
		}
	}
}
*/
import "C"

import "time"

// Spin runs in C until its thread has used d of CPU time: throttled or
// preempted time does not count, so a call costs d of CPU whatever the
// quota.
func Spin(d time.Duration) uint64 {
	if d <= 0 {
		return 0
	}
	return uint64(C.cspin(C.uint64_t(d.Nanoseconds())))
}
