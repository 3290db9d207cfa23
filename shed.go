package cpuwork

import (
	"context"
	"fmt"
	"math"
	"time"
)

// Load shedding at the door. A task that would queue is refused at once,
// with an error wrapping ErrSaturated, when:
//
//   - its class queue is full (Options.QueueLimit);
//   - its ctx has a deadline that the estimated queue wait cannot meet
//     (deadline-aware admission): the tasks ahead of it (queued in its own
//     and more urgent classes) times the class's recent slot time (an
//     exponentially weighted moving average, 1/8 per measured task),
//     divided by the slots;
//   - its class has a queue-wait target (Options.MaxQueueWait) and is
//     shedding: CoDel's test (Nichols and Jacobson, "Controlling Queue
//     Delay", ACM Queue 2012), applied at the door instead of at the head:
//     when the smallest queue wait of the tasks granted a slot during an
//     interval (100 ms, or 2 of the class's slot times if longer) stayed
//     above the target, the queue is standing, not absorbing a burst, and
//     new arrivals of the class are refused until an interval's smallest
//     wait is back under the target. An arrival that finds its class queue
//     empty is never shed.
//
// Everything here runs under the executor's lock, on the path of a task
// that queues anyway; the admission fast path never pays for it.

const (
	codelInterval = 100 * time.Millisecond
	ewmaShift     = 3 // slot-time average: new = old + (sample-old)/8
)

// shedState is one class's queue-wait controller. Guarded by e.mu.
type shedState struct {
	target        int64 // ns; 0: off
	intervalStart int64 // now() when the current interval began
	minWait       int64 // smallest queue wait granted in the interval, ns
	shedding      bool
}

// shedError is a refusal at the door that says why, with the numbers it
// was decided on; it wraps ErrSaturated.
type shedError struct {
	class  Class
	reason string
}

func (e *shedError) Error() string {
	return fmt.Sprintf("cpuwork: %s task shed: %s", e.class, e.reason)
}

func (e *shedError) Unwrap() error { return ErrSaturated }

// queueAdmitLocked decides whether a task of class c may join its queue:
// nil, or the error that refuses it (ErrClosed, ctx's error, or one
// wrapping ErrSaturated: a full queue, a deadline the queue cannot meet, a
// standing queue above the class's target). It counts the refusal. The one
// door every queued submission (Do, Go, and Checkpoint's re-queue is not a
// submission) goes through.
func (e *Executor) queueAdmitLocked(ctx context.Context, c Class) error {
	s := &e.stats[c]
	switch {
	case e.closed.Load():
		s.rejected.Add(1)
		return ErrClosed
	case ctx.Err() != nil:
		s.canceled.Add(1)
		return ctx.Err()
	case e.queues[c].n >= e.limit[c]:
		s.rejected.Add(1)
		return ErrSaturated
	}
	t := now()
	if st := &e.shed[c]; st.target > 0 && e.queues[c].n > 0 {
		e.codelTickLocked(c, t)
		if st.shedding {
			s.rejected.Add(1)
			s.shed.Add(1)
			return &shedError{c, fmt.Sprintf("its queue has stood above the queue-wait target %v for an interval (Options.MaxQueueWait)", time.Duration(st.target))}
		}
	}
	if dl, ok := ctx.Deadline(); ok {
		if est := e.queueWaitEstimateLocked(c); est > 0 && time.Until(dl) < est {
			s.rejected.Add(1)
			s.shed.Add(1)
			return &shedError{c, fmt.Sprintf("its deadline is in %v but the estimated queue wait is %v", time.Until(dl).Round(time.Microsecond), est.Round(time.Microsecond))}
		}
	}
	return nil
}

// queueWaitEstimateLocked estimates how long a task of class c arriving
// now would wait for a slot; 0 when there is nothing to go on.
func (e *Executor) queueWaitEstimateLocked(c Class) time.Duration {
	ahead := 0
	for k := Critical; k <= c; k++ {
		ahead += e.queues[k].n
	}
	avg := e.stats[c].avgSlotNs.Load()
	if ahead == 0 || avg <= 0 || e.slots <= 0 {
		return 0
	}
	return time.Duration(int64(ahead+1) * avg / int64(e.slots))
}

// codelGrantLocked feeds the queue wait of a task of class c granted a
// slot now into its controller.
func (e *Executor) codelGrantLocked(c Class, wait, t int64) {
	st := &e.shed[c]
	if st.target == 0 {
		return
	}
	st.minWait = min(st.minWait, wait)
	e.codelTickLocked(c, t)
}

// codelTickLocked ends the interval once it has run its length: the class
// sheds during the next one if the smallest wait granted stayed above the
// target (an interval without grants keeps the previous decision).
func (e *Executor) codelTickLocked(c Class, t int64) {
	st := &e.shed[c]
	interval := max(int64(codelInterval), 2*e.stats[c].avgSlotNs.Load())
	if t-st.intervalStart < interval {
		return
	}
	if st.minWait != math.MaxInt64 {
		st.shedding = st.minWait > st.target
	} else if e.queues[c].n == 0 {
		st.shedding = false
	}
	st.intervalStart, st.minWait = t, math.MaxInt64
}

// Background starvation guard: Background is served only when no other
// class waits, except that it gets a slot after backgroundEvery grants to
// other classes while it waits, or at once when its oldest task has waited
// backgroundMaxWait, so it always progresses under sustained load.
const (
	backgroundEvery   = 64
	backgroundMaxWait = time.Second
)
