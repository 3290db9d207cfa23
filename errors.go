package cpuwork

import (
	"context"
	"errors"
	"fmt"

	"github.com/cpuwork/cpuwork/internal/admission"
)

// ErrSaturated is returned at once, without running the task, when the
// task's class queue is full (ClassOptions.QueueLimit) or, for TryGo, when no slot
// is free now. Refusals by the queue-wait target (ClassOptions.MaxQueueWait) and
// by a deadline the queue cannot meet are errors that wrap ErrSaturated and
// say why: test with errors.Is(err, ErrSaturated), not ==. The caller
// should shed the request (HTTP 503/429) rather than retry in a tight loop.
var ErrSaturated = admission.ErrSaturated

// ErrClosed is returned for tasks submitted after Close began, and for
// queued tasks that Close could not run before its context ended.
var ErrClosed = admission.ErrClosed

// ErrGoexit is the error of an asynchronous task (Go, TryGo, or Do of a
// Batch or Background task) whose fn called runtime.Goexit, as t.FailNow
// and t.Fatal do in tests. The worker that ran it is replaced. A task that
// runs on the caller's goroutine (Do of Critical or Interactive) exits
// that goroutine as Goexit does, after its slot is released.
var ErrGoexit = errors.New("cpuwork: task called runtime.Goexit")

// PanicError is the error a task's panic becomes. The executor recovers the
// panic on the goroutine that ran the task, records it in Stats and returns
// it to the submitter; it keeps running other tasks.
type PanicError struct {
	Class Class
	Value any    // the value passed to panic
	Stack []byte // the stack of the panicking goroutine (runtime/debug.Stack)
}

func (p *PanicError) Error() string {
	return fmt.Sprintf("cpuwork: %s task panicked: %v\n\n%s", p.Class, p.Value, p.Stack)
}

// Unwrap returns the panic value if it is an error, so errors.Is and
// errors.As see through a panic(err).
func (p *PanicError) Unwrap() error {
	err, _ := p.Value.(error)
	return err
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
	if e.argsOK(ctx, c, fn) {
		return nil
	}
	return e.badArgs(ctx, c, fn)
}

// argsOK is checkArgs's test, in line where every Do makes it: true when
// no argument is wrong.
func (e *Executor) argsOK(ctx context.Context, c Class, fn func(context.Context) error) bool {
	return ctx != nil && e != nil && e.shutDown != nil && c.valid() && fn != nil
}

// badArgs is checkArgs where some argument is wrong.
func (e *Executor) badArgs(ctx context.Context, c Class, fn func(context.Context) error) error {
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
	if e.shutDown == nil {
		panic("cpuwork: method called on a zero Executor (create one with New)")
	}
}

func invalidClass(c Class) error {
	return fmt.Errorf("cpuwork: invalid class %d (want Critical..Background)", uint8(c))
}
