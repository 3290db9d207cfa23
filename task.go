package cpuwork

import (
	"context"
	"unsafe"

	"github.com/cpuwork/cpuwork/internal/admission"
)

// Task is the handle of an asynchronous task started by Go or TryGo.
type Task struct {
	tc   task
	fn   func(context.Context) error
	stop func() bool // stops the context watch of a queued task
	done chan struct{}
	err  error
	keep admission.Keep // the worker's next task, filled at this one's end
}

// Done is closed when the task has finished or failed.
func (t *Task) Done() <-chan struct{} { return t.done }

// Wait blocks until the task finishes and returns its error (fn's error, a
// *PanicError, ErrGoexit, ctx's error if it ended while queued, or
// ErrClosed if Close failed the queue), or returns ctx's error if ctx ends
// first (the task keeps its place and still runs). After Done is closed,
// Wait returns at once.
func (t *Task) Wait(ctx context.Context) error {
	select {
	case <-t.done:
		return t.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Go submits fn to run asynchronously on an executor worker under a slot
// of class c and returns its handle (Task.Wait gives fn's error). The task
// starts now if a slot is free, else it queues; if ctx ends while it is
// queued, it finishes with ctx's error without running.
//
// Errors (the task is then not started): ErrClosed after Close; an error
// matching ErrSaturated as for Do; ctx's error if ctx has ended; an error
// for an invalid class or a nil fn. A nil ctx panics.
func (e *Executor) Go(ctx context.Context, c Class, fn func(context.Context) error) (*Task, error) {
	if err := e.checkArgs(ctx, c, fn); err != nil {
		return nil, err
	}
	return e.submit(ctx, c, 1, fn, nil)
}

// TryGo is Go without queuing: it starts fn only if a slot is free now and
// no task is queued, and returns ErrSaturated otherwise.
func (e *Executor) TryGo(ctx context.Context, c Class, fn func(context.Context) error) (*Task, error) {
	if err := e.checkArgs(ctx, c, fn); err != nil {
		return nil, err
	}
	if err := e.openFor(ctx, c); err != nil {
		return nil, err
	}
	if !e.g.TryAcquire(admission.Class(c)) {
		e.stats[c].Rejected.Add(1)
		return nil, ErrSaturated
	}
	t := e.newTask(ctx, c, 1, fn, nil)
	if err := e.startFast(t); err != nil {
		return nil, err
	}
	return t, nil
}

// newTask makes the handle of a task of class c expected to run on span
// slots at once (waiter.span); inherit is the innermost task of a
// submitter that waits for it (task.inherit), or nil.
func (e *Executor) newTask(ctx context.Context, c Class, span int, fn func(context.Context) error, inherit *task) *Task {
	t := &Task{fn: fn, done: make(chan struct{})}
	t.tc = task{ctx: ctx, e: e, class: c, inherit: inherit}
	t.tc.w = admission.MakeWaiter(admission.Class(c), admission.KindTask, t)
	t.tc.w.SetSpan(span)
	return t
}

// startFast hands a task that already holds a slot to a worker.
func (e *Executor) startFast(t *Task) error {
	if err := e.admitFastTask(&t.tc, uintptr(unsafe.Pointer(t))); err != nil {
		return err
	}
	t.tc.w.MarkStarted() // never queued, so no cancellation can race this
	e.pools[t.tc.class.pool()].runq <- t
	return nil
}

// openFor returns, and counts, why a task of class c cannot be submitted
// now: ErrClosed after Close, or ctx's error once ctx has ended.
func (e *Executor) openFor(ctx context.Context, c Class) error {
	s := &e.stats[c]
	if e.g.Closed() {
		s.Rejected.Add(1)
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		s.Canceled.Add(1)
		return err
	}
	return nil
}

func (e *Executor) submit(ctx context.Context, c Class, span int, fn func(context.Context) error, inherit *task) (*Task, error) {
	if err := e.openFor(ctx, c); err != nil {
		return nil, err
	}
	t := e.newTask(ctx, c, span, fn, inherit)
	if e.g.TryAcquire(admission.Class(c)) {
		if err := e.startFast(t); err != nil {
			return nil, err
		}
		return t, nil
	}
	if ctx.Done() != nil {
		t.stop = context.AfterFunc(ctx, func() { e.cancelQueued(t) })
	}
	if err := e.g.Admit(ctx, &t.tc.w); err != nil {
		if t.stop != nil {
			t.stop()
		}
		return nil, err
	}
	return t, nil
}

// cancelQueued fails a queued task whose context ended.
func (e *Executor) cancelQueued(t *Task) {
	if !e.g.Withdraw(&t.tc.w) {
		return
	}
	t.err = t.tc.ctx.Err()
	close(t.done)
	e.checkDrained()
}

// runTask runs a task handed to a worker and closes its Done channel on
// every path: fn's return, a panic (run recovers it) or runtime.Goexit
// (the task then fails with ErrGoexit; the worker goroutine ends and its
// pool starts a replacement). It returns the task granted to the same
// pool at this one's end, for the worker to run next (keepNext), or nil.
func (e *Executor) runTask(t *Task) (next *Task) {
	if t.stop != nil {
		t.stop()
	}
	t.keep = admission.Keep{Pool: t.tc.class.pool()}
	returned := false
	defer func() {
		if !returned { // fn called runtime.Goexit: run's deferred finish released the slot
			t.err = ErrGoexit
			close(t.done)
			if k := t.keep.Task; k != nil { // this goroutine ends: another worker runs it
				t.keep.Task = nil
				e.pools[t.keep.Pool].runq <- k.(*Task)
			}
		}
	}()
	tc := &t.tc
	if tc.w.TakeGrant() { // it waited in the queue
		e.timeQueued(tc)
	}
	t.err = e.run(tc, t.fn)
	returned = true
	close(t.done)
	next, _ = t.keep.Task.(*Task)
	t.keep.Task = nil
	return next
}

// newRecord returns a record for a task of class c of e submitted with
// ctx that does not use a running-table entry's own: a task that
// queues, a nested one, one run on the critical lane. It is allocated:
// such a task pays far more for its park and wake-up, or its hand-off to
// the lane, than for the allocation.
func newRecord(ctx context.Context, e *Executor, c Class) *task {
	return &task{ctx: ctx, e: e, class: c, w: admission.MakeWaiter(admission.Class(c), admission.KindCaller, nil)}
}

// Wake runs a Go task the granter granted (sends it to its pool's
// workers, or into keep), fails one it refused, or signals one that waits
// on its worker for its slot back after a Checkpoint.
func (o *owner) Wake(w *admission.Waiter, keep *admission.Keep) {
	if w.Requeued() {
		w.Signal()
		return
	}
	e := (*Executor)(o)
	t := w.Task().(*Task)
	if err := w.Refusal(); err != nil {
		if t.stop != nil {
			t.stop()
		}
		t.err = err
		close(t.done)
		e.checkDrained()
		return
	}
	pool := Class(w.Class()).pool()
	if keep != nil && keep.Task == nil && keep.Pool == pool {
		keep.Task = t
		return
	}
	e.pools[pool].runq <- t
}
