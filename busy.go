package cpuwork

import (
	"time"

	"github.com/cpuwork/cpuwork/budget"
	"github.com/cpuwork/cpuwork/schedstat"
)

// Slots the CPU is not busy in, without a paced quota.
//
// A slot holds a task that may not be on a CPU all along: it reads a
// request body, fetches a source over the network, writes its response,
// waits for a P. Slots as many as the budget's cores then leave cores idle
// while work queues (a semaphore of 2x GOMAXPROCS workers keeps them
// busier). The fractional quota's pacer opens slots beyond ceil(quota) for
// this (fracPacer.busyLocked); without one, the budget watcher does it
// every busyTick from what it measures:
//
//   - the process's CPU use over the interval, as a share of the slots
//     the budget gives (the cgroup's usage under a whole quota);
//   - how often a completing task found a task queued behind it (the
//     releases that dispatched, against the completions);
//   - the process's kernel run delay (its threads' schedstat), and under a
//     quota its throttled periods: the safeguard.
//
// An interval that used under busyUnder of the slots' cores while nearly
// every completion found work queued (busyQueued) opens one more slot, up to twice the
// budget's; one with run delay over busyDelay of the cores, or throttled,
// closes one, and so does one in which few completions found work queued.

const (
	busyTick  = 100 * time.Millisecond
	busyUnder = 0.90 // CPU use, of the slots' cores, under which a queue gets a slot more
	busyDelay = 0.10 // run delay, of the slots' cores, over which a slot closes
	// busyQueued: the share of completions that must find work queued for
	// an interval to count as one whose slots were all held throughout, so
	// that its CPU use is the slots' own and not idle time between bursts.
	busyQueued = 0.9
)

// busySlots is the watcher's state, owned by its goroutine.
type busySlots struct {
	started           bool
	t, delayT         time.Time
	cpu, delay        time.Duration
	done, toWaiters   uint64
	throttled         uint64
	haveDelay, haveTh bool
}

// step measures the interval since the last call for an executor whose
// base slot count is base (budget b) and returns the extra slots to run
// beside them (extra is the current count).
func (s *busySlots) step(e *Executor, b budget.Budget, base, extra int) int {
	now := time.Now()
	cpu := processCPU()
	done := e.completions()
	toWaiters := e.g.toWaiters.Load()
	var throttled uint64
	haveTh := false
	if l, ok := b.Limiting(); ok {
		if st, err := budget.ReadStatDir(l.Dir); err == nil {
			throttled, haveTh = st.ThrottledPeriods, true
		}
	}
	defer func() {
		s.t, s.cpu, s.done, s.toWaiters, s.throttled, s.haveTh = now, cpu, done, toWaiters, throttled, haveTh
	}()
	if !s.started || base < 1 {
		s.started = true
		return extra
	}
	dt := now.Sub(s.t).Seconds()
	if dt <= 0 {
		return extra
	}
	use := (cpu - s.cpu).Seconds() / dt / float64(base)
	completed := done - s.done
	queued := 0.0
	if completed > 0 {
		queued = float64(toWaiters-s.toWaiters) / float64(completed)
	}
	if haveTh && s.haveTh && throttled > s.throttled {
		return max(0, extra-1)
	}
	switch {
	case completed > 0 && queued < 0.25:
		return max(0, extra-1)
	case use < busyUnder && queued >= busyQueued:
		if s.runDelayShare(now, base) > busyDelay {
			return max(0, extra-1)
		}
		return min(base, extra+1)
	case extra > 0 && s.runDelayShare(now, base) > busyDelay:
		return extra - 1
	}
	return extra
}

// runDelayShare is the process's run delay since the last reading, as a
// share of base cores over the time since that reading (0 on the first
// reading, after one more than a few intervals old, or on an error).
func (s *busySlots) runDelayShare(now time.Time, base int) float64 {
	th, err := schedstat.ReadThreads(0)
	if err != nil {
		return 0
	}
	d := th.RunDelay
	prev, prevT, had := s.delay, s.delayT, s.haveDelay
	s.delay, s.delayT, s.haveDelay = d, now, true
	dt := now.Sub(prevT).Seconds()
	if !had || d < prev || dt <= 0 || dt > 5*busyTick.Seconds() {
		return 0
	}
	return (d - prev).Seconds() / dt / float64(base)
}
