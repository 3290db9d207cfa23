package cpuwork

import (
	"context"
	"runtime/debug"
	"sync/atomic"
)

// runOnLane runs an admitted Critical task on the critical lane. If the
// lane refuses it or ctx ends before a lane thread takes it, the slot is
// given back and the task never runs.
func (e *Executor) runOnLane(ctx context.Context, t *task, fn func(context.Context) error) error {
	ran := false
	err := e.critLane.Do(ctx, func() error {
		ran = true
		return e.run(t, fn)
	})
	if !ran {
		e.g.Undo(&t.w, 0, false)
	}
	return err
}

// inline runs a nested task on the slot its caller already holds; a done
// ctx returns its error without running fn. Either way the call counts in
// Nested of the slot's class, and nowhere else.
func (e *Executor) inline(ctx context.Context, t *task, fn func(context.Context) error) (err error) {
	e.stats[t.class].nested.Add(1)
	if err := ctx.Err(); err != nil {
		return err
	}
	defer recoverTask(t.class, &err, &e.stats[t.class].panicked)
	return fn(ctx)
}

// recoverTask turns a task's panic into a *PanicError for the calls that
// defer it, inline and For's chunks; run's deferred end does the same for
// the tasks run runs. It must be the deferred function itself for recover
// to see the panic. panicked, if not nil, counts it.
func recoverTask(class Class, err *error, panicked *atomic.Uint64) {
	if r := recover(); r != nil {
		if panicked != nil {
			panicked.Add(1)
		}
		*err = &PanicError{Class: class, Value: r, Stack: debug.Stack()}
	}
}
