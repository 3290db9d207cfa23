package osthread

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
)

// ErrClosed is returned for tasks submitted to a lane after Close began.
var ErrClosed = errors.New("osthread: lane closed")

// ErrFull is returned by Go when the lane's queue is full.
var ErrFull = errors.New("osthread: lane queue full")

// Options configures a lane.
type Options struct {
	// Threads is the number of locked threads (1..1024).
	Threads int
	// Sched is applied to every thread of the lane.
	Sched Sched
	// QueueLimit bounds tasks waiting for a thread; 0 means 1024.
	QueueLimit int
	// Place, if set, is called on each lane thread with its kernel thread
	// ID after Sched is applied, to put the thread into a cgroup: pass
	// (*cgroup.Group).AddThread from package cpuwork/cgroup (cgroup v1
	// tasks file; on v2 only a threaded subtree allows it). An error fails
	// Start like a scheduling error. It is a hook rather than an import so
	// that this package depends on golang.org/x/sys only.
	Place func(tid int) error
}

// Lane is a fixed set of goroutines, each locked to its own OS thread with
// the lane's scheduling, running submitted tasks in FIFO order.
type Lane struct {
	tasks  chan func()
	mu     sync.RWMutex // senders hold it shared; Close exclusive
	closed bool
	wg     sync.WaitGroup
	tids   []int
	sched  Sched
}

// Start starts a lane. Every thread applies o.Sched before the lane
// accepts work; if any thread cannot (for example a missing CAP_SYS_NICE,
// wrapped as ErrPermission), the threads already started exit and Start
// returns that error. Do not call Start from an init function.
func Start(o Options) (*Lane, error) {
	if o.Threads < 1 || o.Threads > 1024 {
		return nil, fmt.Errorf("osthread: Threads %d out of range 1..1024", o.Threads)
	}
	if err := o.Sched.validate(); err != nil {
		return nil, err
	}
	if o.QueueLimit < 0 {
		return nil, fmt.Errorf("osthread: QueueLimit %d must be >= 0", o.QueueLimit)
	}
	if o.QueueLimit == 0 {
		o.QueueLimit = 1024
	}
	l := &Lane{tasks: make(chan func(), o.QueueLimit), sched: o.Sched}
	type started struct {
		tid int
		err error
	}
	ready := make(chan started, o.Threads)
	for range o.Threads {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			LockNonMain(func() {
				if err := o.Sched.ApplyCurrent(); err != nil {
					ready <- started{err: err}
					return
				}
				if o.Place != nil {
					if err := o.Place(Gettid()); err != nil {
						ready <- started{err: fmt.Errorf("osthread: place thread %d: %w", Gettid(), err)}
						return
					}
				}
				ready <- started{tid: Gettid()}
				for fn := range l.tasks {
					fn()
				}
			})
		}()
	}
	var firstErr error
	for range o.Threads {
		s := <-ready
		if s.err != nil && firstErr == nil {
			firstErr = s.err
		}
		if s.err == nil {
			l.tids = append(l.tids, s.tid)
		}
	}
	if firstErr != nil {
		l.Close(context.Background())
		return nil, firstErr
	}
	return l, nil
}

// TIDs returns the kernel thread IDs of the lane's threads.
func (l *Lane) TIDs() []int { return append([]int(nil), l.tids...) }

// Sched returns the scheduling the lane's threads run with.
func (l *Lane) Sched() Sched { return l.sched }

// Do runs fn on one of the lane's threads and returns its error,
// ErrClosed after Close, or ctx's error if ctx ends before a thread takes
// the task (fn then never runs). Once fn has started, Do waits for it.
//
// A panic in fn is recovered on the lane thread, which goes on serving, and
// raised again in Do's caller with the same value, as if fn had run there
// (the errgroup and conc convention; the lane thread's stack is not kept).
// Package cpuwork recovers its tasks' panics itself and returns them as
// *cpuwork.PanicError, so an executor's critical lane never sees one.
func (l *Lane) Do(ctx context.Context, fn func() error) error {
	if fn == nil {
		return errors.New("osthread: nil task")
	}
	var started atomic.Bool
	var err error
	var p *recovered
	done := make(chan struct{})
	task := func() {
		defer close(done)
		if !started.CompareAndSwap(false, true) {
			return // canceled before it started
		}
		p, err = call(fn)
	}
	defer func() {
		if p != nil {
			panic(p.value)
		}
	}()
	if err := l.send(ctx, task, true); err != nil {
		return err
	}
	select {
	case <-done:
		return err
	case <-ctx.Done():
		if started.CompareAndSwap(false, true) {
			return ctx.Err() // the thread will skip it
		}
		<-done
		return err
	}
}

// Go queues fn to run on one of the lane's threads without waiting. It
// returns ErrFull when the queue is full and ErrClosed after Close. A panic
// in fn is recovered on the lane thread, which goes on serving, and its
// value and stack (runtime/debug.Stack) are passed to onPanic if it is not
// nil.
func (l *Lane) Go(fn func(), onPanic func(value any, stack []byte)) error {
	if fn == nil {
		return errors.New("osthread: nil task")
	}
	task := func() {
		if p, _ := call(func() error { fn(); return nil }); p != nil && onPanic != nil {
			onPanic(p.value, p.stack)
		}
	}
	return l.send(context.Background(), task, false)
}

// send queues task, waiting for room until ctx ends when wait is true;
// otherwise it returns ErrFull when the queue is full. Senders hold the read lock while they
// wait, and Close takes the write lock before it closes the channel, so a
// send never meets a closed channel and no queued task is left behind by
// the threads.
func (l *Lane) send(ctx context.Context, task func(), wait bool) error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return ErrClosed
	}
	if !wait {
		select {
		case l.tasks <- task:
			return nil
		default:
			return ErrFull
		}
	}
	select {
	case l.tasks <- task:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// recovered is a panic caught on a lane thread.
type recovered struct {
	value any
	stack []byte
}

// call runs fn and catches its panic. A panic(nil) is caught too: since Go
// 1.21 it panics with a *runtime.PanicNilError.
func call(fn func() error) (p *recovered, err error) {
	defer func() {
		if r := recover(); r != nil {
			p = &recovered{value: r, stack: debug.Stack()}
		}
	}()
	return nil, fn()
}

// Close stops accepting tasks, lets the threads finish the queued ones and
// waits for them up to ctx. The threads then exit locked, so the runtime
// discards them with their changed scheduling. It returns ctx's error if
// the threads did not finish in time (they still exit when done).
func (l *Lane) Close(ctx context.Context) error {
	l.mu.Lock()
	if !l.closed {
		l.closed = true
		close(l.tasks)
	}
	l.mu.Unlock()
	done := make(chan struct{})
	go func() { l.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
