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
	return c.runsOnWorker() && (e.lowCap.Load() > 0 || e.pacer != nil)
}

// tryAcquireFor is tryAcquire that respects the SpareP bound for Batch and
// Background and counts their slot in lowRunning (under the lock when the
// bound applies, so concurrent callers cannot both pass it).
func (e *Executor) tryAcquireFor(c Class) bool {
	if !c.runsOnWorker() {
		return e.tryAcquire()
	}
	if e.paced.Load() {
		return false
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
func (e *Executor) release() {
	if e.free.Add(1) > 0 && e.waiting.Load() > 0 {
		e.mu.Lock()
		e.dispatchLocked()
		e.unlockAndWake()
	}
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

// pickLocked removes and returns the waiter that gets the next slot:
// Critical first; then Interactive or Batch, whichever has the smaller
// virtual time (charged slot time divided by weight); Background last.
func (e *Executor) pickLocked() *waiter {
	c := Class(NumClasses)
	lc := e.lowCap.Load()
	low := !e.paced.Load() && (lc == 0 || e.lowRunning.Load() < lc) // Batch/Background may take a slot
	batch := low && e.queues[Batch].n > 0
	bgDue := low && e.queues[Background].n > 0 &&
		(e.sinceBackground >= backgroundEvery || now()-e.queues[Background].head.enq >= int64(backgroundMaxWait))
	switch {
	case e.queues[Critical].n > 0:
		c = Critical
	case bgDue:
		c = Background
	case e.queues[Interactive].n > 0 && batch:
		c = Interactive
		if e.vtime(Batch) < e.vtime(Interactive) {
			c = Batch
		}
	case e.queues[Interactive].n > 0:
		c = Interactive
	case batch:
		c = Batch
	case low && e.queues[Background].n > 0:
		c = Background
	default:
		return nil
	}
	w := e.queues[c].popFront()
	e.dequeuedLocked(c)
	switch {
	case c == Background:
		e.sinceBackground = 0
	case e.queues[Background].n > 0:
		e.sinceBackground++
	}
	return w
}

// vtime is class c's virtual time in weighted nanoseconds: slot time
// charged so far plus the estimate for tasks dispatched and still running,
// divided by the class weight, plus the catch-up offset.
func (e *Executor) vtime(c Class) float64 {
	s := &e.stats[c]
	return float64(s.used.Load()+s.inflight.Load())/e.weight[c] + e.lag[c]
}

func (e *Executor) grantLocked(w *waiter) {
	w.granted, w.started = true, true
	s := &e.stats[w.class]
	if !w.requeued && e.shed[w.class].target > 0 {
		t := now()
		e.codelGrantLocked(w.class, t-w.enq, t)
	}
	if !w.requeued {
		s.admitted.Add(1)
	}
	if w.class.runsOnWorker() {
		e.lowRunning.Add(1)
	}
	if w.class == Interactive || w.class == Batch {
		est := s.lastSlotNs.Load()
		if est <= 0 {
			est = int64(time.Millisecond)
		}
		w.est = est
		s.inflight.Add(est)
	}
	e.pending = append(e.pending, w)
}

// unlockAndWake releases mu, then wakes the waiters granted while it was
// held: a blocked caller through its ready channel, a task by sending it to
// the workers.
func (e *Executor) unlockAndWake() {
	if len(e.pending) == 0 {
		e.mu.Unlock()
		return
	}
	var buf [8]*waiter
	ws := append(buf[:0], e.pending...)
	clear(e.pending)
	e.pending = e.pending[:0]
	e.mu.Unlock()
	for _, w := range ws {
		if w.task != nil && !w.requeued {
			e.pools[w.class.pool()].runq <- w.task
		} else {
			w.ready <- struct{}{}
		}
	}
}

// enqueueLocked appends w (or prepends it when front) to its class queue.
func (e *Executor) enqueueLocked(w *waiter, front bool) {
	c := w.class
	q := &e.queues[c]
	if q.n == 0 && (c == Interactive || c == Batch) {
		// A class that starts waiting gets no credit for the time it was
		// idle: its virtual time is raised to the other's if it is behind.
		other := Interactive
		if c == Interactive {
			other = Batch
		}
		if e.queues[other].n > 0 {
			if d := e.vtime(other) - e.vtime(c); d > 0 {
				e.lag[c] += d
			}
		}
	}
	if front {
		q.pushFront(w)
	} else {
		q.pushBack(w)
	}
	e.waiting.Add(1)
	e.waitMask.Or(1 << c)
}

func (e *Executor) dequeuedLocked(c Class) {
	e.waiting.Add(-1)
	if e.queues[c].n == 0 {
		e.waitMask.And(^uint32(1 << c))
	}
}

// removeLocked takes a queued waiter out of its queue (cancellation).
func (e *Executor) removeLocked(w *waiter) {
	e.queues[w.class].remove(w)
	e.dequeuedLocked(w.class)
}

// setPaced is the pacer's callback: it pauses (true) or resumes (false)
// Batch and Background admission. On resume the free slots go to the Batch
// and Background tasks waiting.
func (e *Executor) setPaced(paced bool) {
	if e.paced.Swap(paced) == paced || paced {
		return
	}
	e.mu.Lock()
	e.dispatchLocked()
	e.unlockAndWake()
}
