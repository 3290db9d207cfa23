package cpuwork

import (
	"context"
)

// timeFast decides whether a task of class c admitted on the fast path
// as the n-th admission of its class is timed, and with what weight (0:
// not timed); a timed one starts its slot period at at, or now when at
// is 0 (the caller has not read the clock).
func (e *Executor) timeFast(t *task, n uint64, at int64) {
	s := &e.stats[t.class]
	mask := s.timingMask.Load()
	if n&mask != 0 {
		return
	}
	if at == 0 {
		at = now()
	}
	t.weight, t.start = uint8(mask+1), at
	s.queueWait.record(0, mask+1)
	s.adaptStride(mask, at)
}

// runAdmitted admits t, which took a free slot at once (tryAcquire;
// admitFastTask), and runs fn on the slot. After Close it gives the slot
// back and returns ErrClosed.
func (e *Executor) runAdmitted(t *task, g uintptr, fn func(context.Context) error) error {
	if err := e.admitFastTask(t, g); err != nil {
		if t.entered {
			t.leave()
		}
		return err
	}
	return e.run(t, fn)
}

// admitFastTask counts the admission of t, which took a free slot at
// once (a Do on its goroutine, or a Go task before its worker), sets the
// arrival its class's target counts from, times it if its turn
// (timeFast) and picks it for accounting. After Close it gives the slot
// back and returns ErrClosed. key spreads the admission count (the
// submitting goroutine, or the task).
func (e *Executor) admitFastTask(t *task, key uintptr) error {
	c := t.class
	// Counting first means that either this check sees the executor
	// closed (the admission is undone, ErrClosed) or Close sees the
	// admission and waits for the task.
	n, shard := e.stats[c].Admitted.Inc(key)
	if e.g.Closed() {
		e.g.Undo(&t.w, key, true)
		return ErrClosed
	}
	var at int64 // one clock read for the target's arrival and the timing
	if e.targeted[c] {
		at = now()
		t.w.SetArrival(at)
	}
	e.timeFast(t, n, at)
	if e.acct != nil {
		t.accounted = e.sample.pickAdmitted(n^uint64(shard)<<56, e.stats[c].AvgSlotNs.Load())
	}
	return nil
}
