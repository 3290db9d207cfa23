package cputime

import (
	"time"

	"golang.org/x/sys/unix"
)

func thread() (time.Duration, bool) {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}

func tid() int { return unix.Gettid() }
