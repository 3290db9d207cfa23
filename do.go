package cpuwork

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"runtime/pprof"
	"runtime/trace"
	"sync/atomic"
)

// sampleEvery: the admission fast path times one task in sampleEvery (a
// clock read costs about half the fast path) and records it with that
// weight; queued tasks are always timed.
const sampleEvery = 8

// taskCtx is the context a task's fn receives. It carries the task's slot,
// so Checkpoint can hand the slot over and a nested Do or For on the same
// executor runs on it instead of waiting for a second slot.
// (Fields are ordered to pack: the whole struct is one 168-byte
// allocation per task.)
type taskCtx struct {
	context.Context
	e       *Executor
	start   int64 // now() when the current slot period began (timed tasks)
	lastChk int64 // now() at the last clock read in Checkpoint
	lastGs  int64 // now() at the last Gosched
	stride  int32 // Checkpoint calls between clock reads
	calls   int32
	// shared counts For loops running chunks of this task on helper
	// goroutines: while it is non-zero, Checkpoint with this context from
	// any goroutine only yields the P (the slot is the owner's to hand over).
	shared atomic.Int32
	class  Class
	// weight is the histogram weight of this task's slot-time
	// measurement: 1 for a task that queued (every one is timed),
	// sampleEvery for one timed on the fast path, 0 when it is not timed.
	weight uint8
	// accounted: the task is chosen to be accounted (set at admission on
	// the fast path, else at run's start); from run's start until finish
	// where its time goes is being recorded (account.go; its state is in
	// the executor's accountant).
	accounted bool
	// yielded: the task handed its slot over at a Checkpoint at least
	// once (its slot periods are parts of its run time).
	yielded bool
	// noSlot is set when a Checkpoint gave the slot up and did not get it
	// back: lostByCtx (its ctx ended) or lostByClose (ErrClosed); or when
	// a For that is the whole task gave it back for its helpers' last
	// chunks (handedBack).
	noSlot lostSlot
	w      waiter
}

type lostSlot uint8

const (
	holdsSlot lostSlot = iota
	lostByCtx
	lostByClose
	handedBack
)

// err is what a Checkpoint repeats once the slot is lost.
func (l lostSlot) err(ctx context.Context) error {
	if l == lostByClose {
		return ErrClosed
	}
	return ctx.Err()
}

type taskKey struct{}

// Value returns the task itself for the package's private key, and
// otherwise delegates to the parent.
func (t *taskCtx) Value(key any) any {
	if key == (taskKey{}) {
		return t
	}
	return t.Context.Value(key)
}

func taskOf(ctx context.Context) *taskCtx {
	if t, ok := ctx.(*taskCtx); ok {
		return t
	}
	t, _ := ctx.Value(taskKey{}).(*taskCtx)
	return t
}

var errNilFunc = errors.New("cpuwork: nil task function")

// mustCtx and mustExec panic on the programming errors the standard library
// also panics on (a nil Context, as in context.WithCancel(nil)).
func mustCtx(ctx context.Context) {
	if ctx == nil {
		panic("cpuwork: nil Context")
	}
}

// checkArgs is the argument check every submission starts with: it panics
// on a nil ctx or executor and returns an error for an invalid class or a
// nil fn.
func (e *Executor) checkArgs(ctx context.Context, c Class, fn func(context.Context) error) error {
	mustCtx(ctx)
	mustExec(e)
	if !c.valid() {
		return invalidClass(c)
	}
	if fn == nil {
		return errNilFunc
	}
	return nil
}

func mustExec(e *Executor) {
	if e == nil {
		panic("cpuwork: method called on a nil *Executor (create one with New)")
	}
}

func invalidClass(c Class) error {
	return fmt.Errorf("cpuwork: invalid class %d (want Critical..Background)", uint8(c))
}

// Do waits for a slot for class c, runs fn, releases the slot and returns
// fn's error.
//
// Critical and Interactive tasks run on the caller's own goroutine: no
// hand-off, and the caller's stack, thread (cgo) and profiler labels stay.
// Batch and Background tasks are handed to an executor worker, and Do waits
// for them to finish.
//
// fn receives a context derived from ctx that carries the task's slot: pass
// it to Checkpoint, and to nested Do or For calls, which then run on the
// slot already held instead of waiting for a second one (no nested
// deadlock). Do not use it after fn returns.
//
// A ctx that is already done returns ctx's error without running fn, in
// every class. A nil ctx or a nil *Executor panics (programming errors).
//
// Errors: ErrClosed after Close; an error matching ErrSaturated
// (errors.Is: the bare sentinel for a full queue, a wrapping error that
// says why for a refusal by ClassOptions.MaxQueueWait or a deadline the queue
// cannot meet); ctx's error when ctx ends while the task is queued (fn
// then never runs); a *PanicError when fn panics; otherwise fn's error.
//
// Cost: one allocation (the task's context) and tens of nanoseconds when
// a slot is free and nobody waits; measured by BenchmarkDoUncontended,
// figures in docs/performance.md.
func (e *Executor) Do(ctx context.Context, c Class, fn func(context.Context) error) error {
	return e.do(ctx, c, 1, fn)
}

// do is Do for a task expected to run on span slots at once (a For
// loop's caller: the queue counts its slot time as span times its run
// time; waiter.slotWork).
func (e *Executor) do(ctx context.Context, c Class, span int, fn func(context.Context) error) error {
	if err := e.checkArgs(ctx, c, fn); err != nil {
		return err
	}
	// A nested call (ctx holds a slot of e) runs on that slot: counted
	// in Nested only, whether it runs or its ctx has ended, never as a
	// submission (ClassStats.Nested).
	if tc := taskOf(ctx); tc != nil && tc.e == e && tc.noSlot == holdsSlot {
		return e.inline(ctx, tc, fn)
	}
	if err := ctx.Err(); err != nil { // one rule for every class: a done ctx never runs fn
		e.stats[c].canceled.Add(1)
		return err
	}
	if c.runsOnWorker() {
		t, err := e.submit(ctx, c, span, fn)
		if err != nil {
			return err
		}
		<-t.done
		return t.err
	}
	s := &e.stats[c]
	tc := &taskCtx{Context: ctx, e: e, class: c}
	tc.w.class, tc.w.span = c, int32(span)
	if e.g.targetOf(c) != 0 {
		tc.w.enq = now() // the arrival its class's target counts from
	}
	if !e.g.tryAcquire() {
		if err := e.acquireSlow(ctx, tc); err != nil {
			return err
		}
	} else if n, err := e.admitFast(c); err != nil {
		return err
	} else {
		if n%sampleEvery == 0 {
			tc.weight, tc.start = sampleEvery, now()
			s.queueWait.record(0, sampleEvery)
		}
		if a := e.acct; a != nil {
			tc.accounted = a.pickAdmitted(n, s.avgSlotNs.Load())
		}
	}
	if c == Critical && e.critLane != nil {
		return e.runOnLane(ctx, tc, fn)
	}
	return e.run(tc, fn)
}

// admitFast counts an admission made by tryAcquire and then checks for
// Close. Counting first means that either this check sees the executor
// closed (the slot is given back, ErrClosed) or Close sees the admission
// and waits for the task.
func (e *Executor) admitFast(c Class) (uint64, error) {
	s := &e.stats[c]
	n := s.admitted.Add(1)
	if e.g.isClosed() {
		s.admitted.Add(^uint64(0))
		s.rejected.Add(1)
		var noEst int64
		e.releaseSlot(c, &noEst)
		return 0, ErrClosed
	}
	return n, nil
}

// acquireSlow queues tc's waiter and blocks until it is granted a slot or
// ctx ends.
func (e *Executor) acquireSlow(ctx context.Context, tc *taskCtx) error {
	s := &e.stats[tc.class]
	w := &tc.w
	w.ready = make(chan struct{}, 1)
	w.enq = now()
	e.g.setDue(ctx, w, w.enq)
	e.g.lock()
	if err := e.g.queueAdmitLocked(ctx, w, false); err != nil {
		e.g.unlock()
		return err
	}
	e.g.enqueueLocked(w)
	e.g.dispatchLocked()
	e.g.unlockAndWake()
	if err := e.await(ctx, w); err != nil {
		return err
	}
	tc.weight, tc.start = 1, now()
	s.queueWait.record(tc.start-w.enq, 1)
	return nil
}

// await blocks until w, queued by the caller, is granted a slot (nil), is
// refused because its latency target can no longer be met (that error),
// is failed by Close (ErrClosed) or its ctx ends while it is still queued
// (ctx's error; a slot granted at that moment is given back).
func (e *Executor) await(ctx context.Context, w *waiter) error {
	s := &e.stats[w.class]
	select {
	case <-w.ready:
	case <-ctx.Done():
		e.g.lock()
		if w.queued {
			e.g.removeLocked(w)
			e.g.unlock()
			s.canceled.Add(1)
			e.checkDrained()
			return ctx.Err()
		}
		e.g.unlock()
		<-w.ready // granted or closed out just now
		if w.granted {
			w.granted = false
			if !w.requeued {
				s.admitted.Add(^uint64(0)) // counted at grant; it never ran
			}
			e.ungrant(w)
			s.canceled.Add(1)
			return ctx.Err()
		}
	}
	if !w.granted {
		if err := w.refused; err != nil { // counted when refused
			w.refused = nil
			return err
		}
		s.rejected.Add(1)
		return ErrClosed
	}
	w.granted = false
	return nil
}

// ungrant gives back a slot granted to a waiter that will not use it.
func (e *Executor) ungrant(w *waiter) { e.releaseSlot(w.class, &w.est) }

// releaseSlot gives a slot held for class c back through the granter's one
// release (granter.release: a task finished, a task handed its slot over
// at a Checkpoint, a For helper stopped, a granted waiter was cancelled,
// an admission was undone by Close), then, after Close, signals a drained
// executor, and lets the fractional pacer re-check the quota.
func (e *Executor) releaseSlot(c Class, est *int64) { e.releaseSlotKeep(c, est, nil) }

// releaseSlotKeep is releaseSlot for a task ending on a worker: a task
// granted to keep's pool goes into keep for the worker to run next.
func (e *Executor) releaseSlotKeep(c Class, est *int64, keep *keepNext) {
	e.g.release(c, est, keep)
	if e.g.isClosed() {
		e.checkDrained()
	}
	if p := e.frac.Load(); p != nil {
		p.maybeStep()
	}
}

// runOnLane runs an admitted Critical task on the critical lane. If the
// lane refuses it or ctx ends before a lane thread takes it, the slot is
// given back and the task never runs.
func (e *Executor) runOnLane(ctx context.Context, tc *taskCtx, fn func(context.Context) error) error {
	ran := false
	err := e.critLane.Do(ctx, func() error {
		ran = true
		return e.run(tc, fn)
	})
	if !ran {
		s := &e.stats[tc.class]
		s.admitted.Add(^uint64(0))
		s.canceled.Add(1)
		e.releaseSlot(tc.class, &tc.w.est)
	}
	return err
}

// run executes fn under tc's slot with labels, a trace region and panic
// recovery, then accounts and releases the slot.
func (e *Executor) run(tc *taskCtx, fn func(context.Context) error) (err error) {
	if a := e.acct; a != nil {
		var wait int64
		if tc.weight == 1 {
			wait = tc.start - tc.w.enq
			tc.accounted = a.pick(wait, e.stats[tc.class].avgSlotNs.Load())
		}
		if tc.accounted {
			t := now()
			e.accountBegin(tc, t-wait, t)
		}
	}
	defer e.finish(tc)
	if !e.noLabels {
		defer pprof.SetGoroutineLabels(e.setLabels(tc))
	}
	if trace.IsEnabled() {
		defer trace.StartRegion(tc, tc.class.String()).End()
	}
	defer recoverTask(tc.class, &err, &e.stats[tc.class].panicked)
	return fn(tc)
}

// setLabels sets the goroutine's profiler labels to the caller's plus the
// class's, and returns the context whose labels restore the caller's
// afterwards: tc's own when it has labels, else one without any, which
// restores the same (none) without walking the caller's context chain a
// second time.
func (e *Executor) setLabels(tc *taskCtx) (restore context.Context) {
	has := false
	pprof.ForLabels(tc.Context, func(string, string) bool { has = true; return false })
	if has {
		pprof.SetGoroutineLabels(pprof.WithLabels(tc.Context, pprof.Labels(labelKey, tc.class.String())))
		return tc.Context
	}
	pprof.SetGoroutineLabels(e.labels[tc.class])
	return context.Background()
}

// finish accounts a finished task and releases its slot.
func (e *Executor) finish(tc *taskCtx) {
	s := &e.stats[tc.class]
	if tc.weight != 0 {
		end := now()
		e.charge(tc, end)
		if w := &tc.w; w.dueSet && w.target != targetNone && end > w.due {
			s.endedLate.Add(1)
		}
	}
	s.completed.Add(1)
	if tc.noSlot == holdsSlot {
		var keep *keepNext // a task on a worker: the worker's next task
		if t := tc.w.task; t != nil {
			keep = &t.keep
		}
		e.releaseSlotKeep(tc.class, &tc.w.est, keep)
	} else if e.g.isClosed() {
		e.checkDrained()
	}
	if tc.accounted {
		e.accountEnd(tc, now())
	}
}

// charge records the slot time of tc's current slot period, ending at end.
func (e *Executor) charge(tc *taskCtx, end int64) {
	s := &e.stats[tc.class]
	d := end - tc.start
	s.slotTime.record(d, uint64(tc.weight))
	s.used.Add(d * int64(tc.weight))
	if tc.weight == 1 {
		e.g.recordSlot(tc.class, d)
		if w := &tc.w; w.declared > 0 && !tc.yielded {
			e.g.recordService(tc.class, w.declared, d)
		}
	}
	if old := s.avgSlotNs.Load(); old == 0 {
		s.avgSlotNs.Store(d)
	} else {
		s.avgSlotNs.Store(old + (d-old)>>ewmaShift) // racy by design: an estimate
		exp := tc.w.work
		if exp <= 0 {
			exp = old
		}
		miss := d - exp
		if miss < 0 {
			miss = -miss
		}
		dev := s.devSlotNs.Load()
		s.devSlotNs.Store(dev + (miss-dev)>>ewmaShift)
	}
}

// inline runs a nested task on the slot its caller already holds; a done
// ctx returns its error without running fn. Either way the call counts in
// Nested of the slot's class, and nowhere else.
func (e *Executor) inline(ctx context.Context, tc *taskCtx, fn func(context.Context) error) (err error) {
	e.stats[tc.class].nested.Add(1)
	if err := ctx.Err(); err != nil {
		return err
	}
	defer recoverTask(tc.class, &err, &e.stats[tc.class].panicked)
	return fn(ctx)
}

// recoverTask is the one place a task's panic becomes a *PanicError: run,
// inline and For's chunks defer it. It must be the deferred function itself
// for recover to see the panic. panicked, if not nil, counts it.
func recoverTask(class Class, err *error, panicked *atomic.Uint64) {
	if r := recover(); r != nil {
		if panicked != nil {
			panicked.Add(1)
		}
		*err = &PanicError{Class: class, Value: r, Stack: debug.Stack()}
	}
}
