package admission

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"
	"unsafe"
)

// testExec is a minimal executor over a Granter for this package's
// tests: its Do, Go and TryGo go through the protocol the executor uses
// (TryAcquire, Admit, Await, Withdraw, Record, Release), and its
// Stats reads the counters and the queue lengths. It runs every task on
// a goroutine of its own.
type testExec struct {
	g     Granter
	stats [NumClasses]Counters
	wg    sync.WaitGroup
}

// Options and ClassOptions mirror the executor's, for the tests.
type Options struct {
	Slots   int
	Classes [NumClasses]ClassOptions
}

type ClassOptions = ClassConfig

// Target and WithTarget mirror the executor's.
type Target struct{ Latency, Service time.Duration }

func WithTarget(ctx context.Context, t Target) context.Context {
	return TargetContext(ctx, t.Latency, t.Service)
}

func newExec(t testing.TB, o Options) *testExec {
	t.Helper()
	e := &testExec{}
	cfg := Config{Classes: o.Classes, DefaultQueueLimit: 1024, Owner: e, Log: slog.New(slog.DiscardHandler)}
	for c := range e.stats {
		cfg.Counters[c] = &e.stats[c]
	}
	if err := e.g.Init(cfg); err != nil {
		t.Fatal(err)
	}
	e.g.SetCapacity(o.Slots)
	t.Cleanup(e.wg.Wait)
	return e
}

// testTask is a task started by Go.
type testTask struct {
	w    Waiter
	ctx  context.Context
	fn   func(context.Context) error
	stop func() bool
	done chan struct{}
	err  error
}

func (t *testTask) Wait(ctx context.Context) error {
	select {
	case <-t.done:
		return t.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Wake is the Owner's: a task granted runs on a goroutine, one refused
// fails, one re-queued at a Checkpoint is signalled (the Granter signals
// blocked callers itself).
func (e *testExec) Wake(w *Waiter, _ *Keep) {
	if w.requeued {
		w.ready <- struct{}{}
		return
	}
	t := w.task.(*testTask)
	if t.stop != nil {
		t.stop()
	}
	if err := w.Refusal(); err != nil {
		t.err = err
		close(t.done)
		return
	}
	w.granted = false
	e.wg.Add(1)
	go func() { defer e.wg.Done(); e.runTask(t, true) }()
}

func (e *testExec) Released() {}

// run runs fn on a slot of class c held since start, then records its
// slot time and releases the slot.
func (e *testExec) run(ctx context.Context, w *Waiter, waited bool, fn func(context.Context) error) error {
	start := Now()
	err := fn(ctx)
	e.g.Record(SlotPeriod{W: w, Slot: Now() - start, Weight: 1, Waited: waited, Last: true})
	e.stats[w.class].Completed.Inc(uintptr(unsafe.Pointer(w)))
	e.g.Release(w, nil)
	return err
}

func (e *testExec) runTask(t *testTask, waited bool) {
	t.err = e.run(t.ctx, &t.w, waited, t.fn)
	close(t.done)
}

// Do runs fn under a slot of class c, queuing for one if none is free.
func (e *testExec) Do(ctx context.Context, c Class, fn func(context.Context) error) error {
	if err := ctx.Err(); err != nil {
		e.stats[c].Canceled.Add(1)
		return err
	}
	w := &Waiter{class: c}
	if e.g.TryAcquire(c) {
		e.stats[c].Admitted.Inc(uintptr(unsafe.Pointer(w)))
		return e.run(ctx, w, false, fn)
	}
	w.ready = make(chan struct{}, 1)
	if err := e.g.Admit(ctx, w); err != nil {
		return err
	}
	return e.run(ctx, w, true, fn)
}

// Go starts fn under a slot of class c, queuing it if none is free.
func (e *testExec) Go(ctx context.Context, c Class, fn func(context.Context) error) (*testTask, error) {
	if err := ctx.Err(); err != nil {
		e.stats[c].Canceled.Add(1)
		return nil, err
	}
	t := &testTask{ctx: ctx, fn: fn, done: make(chan struct{})}
	t.w = Waiter{class: c, kind: KindTask, task: t}
	if e.g.TryAcquire(c) {
		e.stats[c].Admitted.Inc(uintptr(unsafe.Pointer(t)))
		t.w.started = true
		e.wg.Add(1)
		go func() { defer e.wg.Done(); e.runTask(t, false) }()
		return t, nil
	}
	if ctx.Done() != nil {
		t.stop = context.AfterFunc(ctx, func() {
			if e.g.Withdraw(&t.w) {
				t.err = ctx.Err()
				close(t.done)
			}
		})
	}
	if err := e.g.Admit(ctx, &t.w); err != nil {
		if t.stop != nil {
			t.stop()
		}
		return nil, err
	}
	return t, nil
}

// TryGo is Go without queuing.
func (e *testExec) TryGo(ctx context.Context, c Class, fn func(context.Context) error) (*testTask, error) {
	if !e.g.TryAcquire(c) {
		e.stats[c].Rejected.Add(1)
		return nil, ErrSaturated
	}
	e.stats[c].Admitted.Inc(0)
	t := &testTask{ctx: ctx, fn: fn, done: make(chan struct{})}
	t.w = Waiter{class: c, kind: KindTask, task: t, started: true}
	e.wg.Add(1)
	go func() { defer e.wg.Done(); e.runTask(t, false) }()
	return t, nil
}

// Allow is the executor's Allow.
func (e *testExec) Allow(ctx context.Context, c Class) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return e.g.Allow(ctx, c)
}

type classStats struct {
	Admitted, Completed, Rejected, Canceled, Shed, AdmittedLate uint64
	Queued                                                      int
}

type stats struct{ Classes [NumClasses]classStats }

// Stats reads the counters and the queue lengths.
func (e *testExec) Stats() stats {
	var st stats
	queued := e.g.Snapshot(0).Queued
	for c := range e.stats {
		s := &e.stats[c]
		st.Classes[c] = classStats{Admitted: s.Admitted.Load(), Completed: s.Completed.Load(), Rejected: s.Rejected.Load(),
			Canceled: s.Canceled.Load(), Shed: s.Shed.Load(), AdmittedLate: s.Late.Load(), Queued: queued[c]}
	}
	return st
}

// hold occupies n slots of e with Interactive tasks until the returned
// release function is called.
func hold(t *testing.T, e *testExec, n int) (release func()) {
	t.Helper()
	gate := make(chan struct{})
	var started, done sync.WaitGroup
	started.Add(n)
	done.Add(n)
	for range n {
		go func() {
			defer done.Done()
			e.Do(context.Background(), Interactive, func(context.Context) error {
				started.Done()
				<-gate
				return nil
			})
		}()
	}
	started.Wait()
	return func() { close(gate); done.Wait() }
}

func waitQueued(t *testing.T, e *testExec, c Class, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for e.Stats().Classes[c].Queued < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d %s tasks never queued (have %d)", n, c, e.Stats().Classes[c].Queued)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func now() int64 { return Now() }

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached in 10 s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// modeOf is the controller state of a class that sheds (or not), in a
// clear overload (or not).
func modeOf(sheds, clear bool) doorMode {
	switch {
	case !sheds:
		return calm
	case clear:
		return overload
	default:
		return shedding
	}
}
