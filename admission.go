package cpuwork

import "time"

// tryAcquire takes a free slot if one is free and nobody is queued (queued
// tasks are served first; a fresh arrival does not overtake them).
func (e *Executor) tryAcquire() bool {
	if e.waiting.Load() != 0 {
		return false
	}
	for {
		f := e.free.Load()
		if f <= 0 {
			return false
		}
		if e.free.CompareAndSwap(f, f-1) {
			return true
		}
	}
}

// capped reports whether class c is under the SpareP bound, so that its
// admissions must go through the lock where the bound is checked.
func (e *Executor) capped(c Class) bool {
	return c.runsOnWorker() && e.lowCap.Load() > 0
}

// tryAcquireFor is tryAcquire that respects the SpareP bound for Batch and
// Background and counts their slot in lowRunning (under the lock when the
// bound applies, so concurrent callers cannot both pass it).
func (e *Executor) tryAcquireFor(c Class) bool {
	if !c.runsOnWorker() {
		return e.tryAcquire()
	}
	if e.lowCap.Load() == 0 {
		if !e.tryAcquire() {
			return false
		}
		e.lowRunning.Add(1)
		return true
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if lc := e.lowCap.Load(); lc > 0 && e.lowRunning.Load() >= lc {
		return false
	}
	if !e.tryAcquire() {
		return false
	}
	e.lowRunning.Add(1)
	return true
}

// release returns a slot and, if anyone is queued, hands free slots out.
// A waiter increments waiting before it looks at free, and release adds to
// free before it looks at waiting, so (sequentially consistent atomics) one
// of the two always sees the other: no slot stays free while a task waits.
func (e *Executor) release(keep *keepNext) {
	if e.free.Add(1) > 0 && e.waiting.Load() > 0 {
		e.mu.Lock()
		e.dispatchLocked()
		e.unlockAndWakeKeep(keep)
	}
}

// keepNext is where a worker whose task just ended takes the next task
// granted to its own pool, to run it itself: sending it to the pool's
// queue would wake another worker goroutine (ready, wakep: a thread wake
// and a spinning M) while this one parks: ~1.5 % of a 2-slot executor's
// perf samples with 2 ms tasks (chansend -> wakep -> futex wake, and the
// parked worker's stopm); CPU per round of the quota child 22.1-22.3 ->
// 21.9-22.1 ms (docs/architecture.md, "Where tasks run").
type keepNext struct {
	pool int
	task *Task
}

// dispatchLocked hands free slots to queued waiters in policy order.
func (e *Executor) dispatchLocked() {
	for e.waiting.Load() > 0 {
		f := e.free.Load()
		if f <= 0 {
			return
		}
		if !e.free.CompareAndSwap(f, f-1) {
			continue
		}
		w := e.pickLocked()
		if w == nil { // cannot happen while waiting > 0; keep the slot free
			e.free.Add(1)
			return
		}
		e.grantLocked(w)
	}
}

// grantLocked gives a slot to w, just out of the queue: it counts the
// admission (a submission's first grant only) and queues w's wake-up.
func (e *Executor) grantLocked(w *waiter) {
	w.granted, w.started = true, true
	s := &e.stats[w.class]
	first := !w.requeued && w.kind != waitHelper
	if first {
		s.admitted.Add(1) // before the controller reads it (codelTickLocked)
	}
	if first && e.shed[w.class].target > 0 {
		t := now()
		e.codelGrantLocked(w.class, t-w.enq, t)
	}
	if w.class.runsOnWorker() {
		e.lowRunning.Add(1)
	}
	// The grant's expected slot time: what the waiter was queued with
	// (its given run time or its class's average), else the class's last
	// measured slot time, else 1 ms. It counts in its class's virtual time
	// and in the running work the door's estimate sees until released.
	est := w.work
	if est <= 0 {
		est = e.share.lastSlot[w.class].Load()
	}
	if est <= 0 {
		est = int64(time.Millisecond)
	}
	w.est = est
	e.share.inflight[w.class].Add(est)
	e.pending = append(e.pending, w)
}

// unlockAndWake releases mu, then wakes the waiters granted or refused
// while it was held: a blocked caller or helper through its ready
// channel, a task by sending it to the workers (granted) or failing it
// (refused).
func (e *Executor) unlockAndWake() { e.unlockAndWakeKeep(nil) }

// unlockAndWakeKeep is unlockAndWake that puts the first task granted to
// keep's pool into keep (when keep is not nil) instead of sending it.
func (e *Executor) unlockAndWakeKeep(keep *keepNext) {
	if len(e.pending) == 0 {
		e.mu.Unlock()
		return
	}
	var buf [8]*waiter
	ws := append(buf[:0], e.pending...)
	clear(e.pending)
	e.pending = e.pending[:0]
	e.mu.Unlock()
	failed := false
	for _, w := range ws {
		switch {
		case w.kind == waitTask && !w.requeued && w.refused != nil:
			t := w.task
			if t.stop != nil {
				t.stop()
			}
			t.err = w.refused
			close(t.done)
			failed = true
		case w.kind == waitTask && !w.requeued:
			if keep != nil && keep.task == nil && keep.pool == w.class.pool() {
				keep.task = w.task
				continue
			}
			e.pools[w.class.pool()].runq <- w.task
		default:
			w.ready <- struct{}{}
		}
	}
	if failed {
		e.checkDrained()
	}
}
