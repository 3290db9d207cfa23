package bench

import (
	"runtime"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
	"golang.org/x/sys/unix"
)

// precisePacer is a vegeta pacer (constant, or stepPacer) with its waits
// slept precisely.
//
// vegeta sleeps to each send time with time.Sleep. In an otherwise idle Go
// process that sleep ends in the netpoller's epoll_wait, whose timeout is in
// whole milliseconds: a wait under 1 ms becomes 1 ms, a longer one is cut
// to whole milliseconds and finished by another 1 ms wait (netpoll in
// runtime/netpoll_epoll.go). Every request was sent 0-1.1 ms after its
// intended time (p50 0.63-0.76 ms), and that lateness counted as latency
// for every variant. Here the pacing goroutine locks its thread, sets the
// thread's timer slack to 1 ns (prctl PR_SET_TIMERSLACK) and sleeps each
// wait in nanosleep(2): sends 0.12-0.14 ms late at p50, 0.21-0.31 ms at
// p99 (docs/raw/loadgen-pacer-2026-11-24.txt). Pace is called by vegeta's
// one pacing goroutine only.
type precisePacer struct {
	vegeta.Pacer
	locked bool
}

// Pace sleeps the constant pacer's wait itself and returns no wait.
func (p *precisePacer) Pace(elapsed time.Duration, hits uint64) (time.Duration, bool) {
	w, stop := p.Pacer.Pace(elapsed, hits)
	if w <= 0 || stop {
		return w, stop
	}
	if !p.locked {
		// Never unlocked: the thread ends with the generator's process.
		runtime.LockOSThread()
		// On failure the kernel's default slack (50 µs) applies.
		_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
		p.locked = true
	}
	ts := unix.NsecToTimespec(int64(w))
	for unix.Nanosleep(&ts, &ts) == unix.EINTR {
	}
	return 0, false
}
