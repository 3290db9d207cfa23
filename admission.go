package cpuwork

import "time"

// tryAcquire takes a free slot if one is free and nobody is queued (queued
// tasks are served first; a fresh arrival does not overtake them).
func (g *granter) tryAcquire() bool {
	if g.waiting.Load() != 0 {
		return false
	}
	for {
		f := g.free.Load()
		if f <= 0 {
			return false
		}
		if g.free.CompareAndSwap(f, f-1) {
			return true
		}
	}
}

// capped reports whether class c is under the SpareP bound, so that its
// admissions must go through the lock where the bound is checked.
func (g *granter) capped(c Class) bool {
	return c.runsOnWorker() && g.lowCap.Load() > 0
}

// tryAcquireFor is tryAcquire that respects the SpareP bound for Batch and
// Background and counts their slot in lowRunning (under the lock when the
// bound applies, so concurrent callers cannot both pass it).
func (g *granter) tryAcquireFor(c Class) bool {
	if !c.runsOnWorker() {
		return g.tryAcquire()
	}
	if g.lowCap.Load() == 0 {
		if !g.tryAcquire() {
			return false
		}
		g.lowRunning.Add(1)
		return true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if lc := g.lowCap.Load(); lc > 0 && g.lowRunning.Load() >= lc {
		return false
	}
	if !g.tryAcquire() {
		return false
	}
	g.lowRunning.Add(1)
	return true
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
func (g *granter) dispatchLocked() {
	for g.waiting.Load() > 0 {
		f := g.free.Load()
		if f <= 0 {
			return
		}
		if !g.free.CompareAndSwap(f, f-1) {
			continue
		}
		w := g.pickLocked()
		if w == nil { // cannot happen while waiting > 0; keep the slot free
			g.free.Add(1)
			return
		}
		g.grantLocked(w)
	}
}

// grantLocked gives a slot to w, just out of the queue: it counts the
// admission (a submission's first grant only) and queues w's wake-up.
func (g *granter) grantLocked(w *waiter) {
	w.granted, w.started = true, true
	s := &g.stats[w.class]
	first := !w.requeued && w.kind != waitHelper
	if first {
		s.admitted.Add(1) // before the controller reads it (codelTickLocked)
	}
	if first && g.shed[w.class].target > 0 {
		t := now()
		g.codelGrantLocked(w.class, t-w.enq, t)
	}
	if w.class.runsOnWorker() {
		g.lowRunning.Add(1)
	}
	// The grant's expected slot time: what the waiter was queued with
	// (its given run time or its class's average), else the class's last
	// measured slot time, else 1 ms. It counts in its class's virtual time
	// and in the running work the door's estimate sees until released.
	est := w.work
	if est <= 0 {
		est = g.share.lastSlot[w.class].Load()
	}
	if est <= 0 {
		est = int64(time.Millisecond)
	}
	w.est = est
	g.share.inflight[w.class].Add(est)
	g.pending = append(g.pending, w)
}

// unlockAndWake releases mu, then has the executor wake the waiters
// granted or refused while it was held (Executor.wake).
func (g *granter) unlockAndWake() { g.unlockAndWakeKeep(nil) }

// unlockAndWakeKeep is unlockAndWake that puts the first task granted to
// keep's pool into keep (when keep is not nil) instead of sending it.
func (g *granter) unlockAndWakeKeep(keep *keepNext) {
	if len(g.pending) == 0 {
		g.mu.Unlock()
		return
	}
	var buf [8]*waiter
	ws := append(buf[:0], g.pending...)
	clear(g.pending)
	g.pending = g.pending[:0]
	g.mu.Unlock()
	g.owner.wake(ws, keep)
}

// wake wakes waiters the granter granted or refused: a blocked caller or
// helper through its ready channel, a task by sending it to the workers
// (granted) or failing it (refused).
func (e *Executor) wake(ws []*waiter, keep *keepNext) {
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
