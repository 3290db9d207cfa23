package cpuwork

// timeFast times t, a task admitted on the fast path whose turn it is
// (its class's n-th admission, n&mask == 0): its weight is the stride
// mask+1, and its slot period starts at at, or now when at is 0 (the
// caller has not read the clock).
func (e *Executor) timeFast(t *task, mask uint64, at int64) {
	s := &e.stats[t.class]
	if at == 0 {
		at = now()
	}
	t.weight, t.start = uint8(mask+1), at
	s.queueWait.record(0, mask+1)
	s.adaptStride(mask, at)
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
	if mask := e.stats[c].timingMask.Load(); n&mask == 0 {
		e.timeFast(t, mask, at)
	}
	if e.acct != nil {
		t.accounted = e.sample.pickAdmitted(n^uint64(shard)<<56, e.stats[c].AvgSlotNs.Load())
	}
	return nil
}
