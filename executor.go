package cpuwork

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"runtime/trace"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cpuwork/cpuwork/budget"
	"github.com/cpuwork/cpuwork/osthread"
)

// DefaultQueueLimit is the per-class queue bound used when
// Options.QueueLimit leaves a class at 0.
const DefaultQueueLimit = 1024

// MaxSlots is the largest slot count an executor accepts.
const MaxSlots = 4096

// Default weights of the classes that share slots by weight.
const (
	DefaultInteractiveWeight = 4
	DefaultBatchWeight       = 1
)

// Options configures an Executor. The zero value is valid: slots follow the
// detected CPU budget (budget.Budget.Slots: floor of the budget, at least 1,
// at most GOMAXPROCS), each class queues up to DefaultQueueLimit tasks, and
// Interactive and Batch share slots 4:1.
type Options struct {
	// Slots fixes the number of tasks that run at once. 0 means follow the
	// CPU budget, re-read every WatchInterval. Valid: 0..MaxSlots.
	Slots int

	// QueueLimit bounds each class's queue; a submission to a full queue
	// returns ErrSaturated at once. 0 means DefaultQueueLimit; negative
	// values are invalid.
	QueueLimit [NumClasses]int

	// Weights are the relative shares of measured slot time that
	// Interactive and Batch get while both wait (weighted fair queuing on
	// measured slot time, the virtual-time form of deficit round robin).
	// 0 means the default (Interactive 4, Batch 1). Critical is always
	// served first and Background last, so their weights are ignored.
	Weights [NumClasses]int

	// WatchInterval is how often the budget is re-read when Slots is 0.
	// 0 means budget.DefaultWatchInterval (1s); negative means never: the
	// slot count stays what New detected.
	WatchInterval time.Duration

	// DisableProfileLabels turns off the cpuwork.class pprof label that
	// tasks otherwise run with (saves ~12 ns per task).
	DisableProfileLabels bool

	// Logger receives budget changes and watcher errors. nil logs nothing.
	Logger *slog.Logger

	// NoDemotion runs Batch and Background workers as plain goroutines.
	// By default each of them is locked to its own OS thread set to
	// BatchSched (SCHED_IDLE; nice 19 where that is refused), so the kernel
	// preempts batch work the instant a latency-sensitive thread wants the
	// CPU. Demotion needs no privileges. See osthread.
	NoDemotion bool

	// BatchSched is the scheduling of demoted worker threads; the zero
	// value means osthread.Demoted (SCHED_IDLE).
	BatchSched osthread.Sched

	// SpareP keeps one P free of batch work: Batch and Background together
	// hold at most GOMAXPROCS-1 slots (at least 1), so goroutines outside
	// the executor and Critical/Interactive work always find a P, and with
	// demoted threads the kernel runs them first. Used as designed,
	// GOMAXPROCS and Slots are both the budget plus one: batch then keeps
	// every core of the budget and latency-sensitive work has its own P and
	// slot (maxprocs.Set(maxprocs.BudgetPlusOne) sets GOMAXPROCS so). With
	// GOMAXPROCS and Slots at the budget, it costs batch 1/GOMAXPROCS of its
	// throughput. The executor never changes GOMAXPROCS itself. Measured
	// effect: docs/architecture.md.
	SpareP bool

	// PaceQuota turns on quota pacing: when Slots is 0 and the budget comes
	// from a CFS quota, the executor runs ceil(quota) slots instead of
	// floor and paces Batch and Background admission to keep the process
	// under its quota (pacer.go); Critical and Interactive are never paced.
	// Off by default: in `cpuwork bench --scenario quota` (1.25 CPUs) it
	// avoided throttling but gave a worse round p99 than the floor policy
	// and used less of the quota (docs/architecture.md).
	PaceQuota bool

	// CriticalLane, when set, runs Critical tasks admitted by Do on a
	// dedicated lane of locked OS threads with these options (for cgo
	// libraries that need a fixed thread, or an affinity and priority of
	// their own) instead of on the caller's goroutine.
	CriticalLane *osthread.Options

	// detect replaces budget.Detect in tests.
	detect func() (budget.Budget, error)
}

// Executor is an admission controller for CPU slots: at most Slots() tasks
// hold a slot at once; the rest wait in bounded per-class queues. See the
// package documentation for the model. All methods are safe for concurrent
// use. An Executor must be created with New.
type Executor struct {
	// Hot fields, each touched by the admission fast path.
	free     atomic.Int64  // free slots; negative while the slot count shrinks
	waiting  atomic.Int64  // queued waiters, all classes
	waitMask atomic.Uint32 // bit c set while class c has queued waiters
	closed   atomic.Bool
	_        [64]byte

	stats [NumClasses]classStats

	mu     sync.Mutex
	slots  int // total slots; guarded by mu
	queues [NumClasses]waitQueue
	lag    [NumClasses]float64 // virtual-time offsets for Interactive, Batch
	weight [NumClasses]float64
	limit  [NumClasses]int
	// pools run asynchronous tasks: poolNormal for Critical and
	// Interactive, poolDemoted (OS threads at SCHED_IDLE unless
	// Options.NoDemotion) for Batch and Background.
	pools [2]*workerPool
	// lowCap bounds the slots Batch and Background hold together (0: no
	// bound; Options.SpareP); lowRunning counts those they hold.
	lowCap     atomic.Int64
	lowRunning atomic.Int64
	spareP     bool
	warned     sync.Once
	critLane   *osthread.Lane
	// paced is set by the pacer while Batch and Background must wait for
	// the quota's next window.
	paced     atomic.Bool
	pacer     *pacer
	pacerStop context.CancelFunc
	pacerDone chan struct{}

	// pending holds waiters granted under mu and not yet woken: they are
	// signalled after mu is released (unlockAndWake), which keeps channel
	// sends and goroutine wake-ups out of the critical section.
	pending []*waiter

	labels   [NumClasses]context.Context
	noLabels bool
	log      *slog.Logger

	watchStop context.CancelFunc
	watchDone chan struct{}
	closeOnce sync.Once
}

// New returns an executor configured by o, with its worker goroutines
// started. It returns an error for invalid options, or when o.Slots is 0 and
// the CPU budget cannot be read (the error wraps budget's; set Slots to run
// without it).
func New(o Options) (*Executor, error) {
	if o.Slots < 0 || o.Slots > MaxSlots {
		return nil, fmt.Errorf("cpuwork: Options.Slots %d out of range 0..%d", o.Slots, MaxSlots)
	}
	e := &Executor{
		noLabels: o.DisableProfileLabels,
		log:      o.Logger,
	}
	for c := range Class(NumClasses) {
		switch l := o.QueueLimit[c]; {
		case l < 0:
			return nil, fmt.Errorf("cpuwork: Options.QueueLimit[%s] is %d, must be >= 0", c, l)
		case l == 0:
			e.limit[c] = DefaultQueueLimit
		default:
			e.limit[c] = l
		}
		if o.Weights[c] < 0 {
			return nil, fmt.Errorf("cpuwork: Options.Weights[%s] is %d, must be >= 0", c, o.Weights[c])
		}
		e.weight[c] = 1
		e.labels[c] = pprof.WithLabels(context.Background(), pprof.Labels(LabelKey, c.String()))
	}
	e.weight[Interactive], e.weight[Batch] = DefaultInteractiveWeight, DefaultBatchWeight
	for _, c := range []Class{Interactive, Batch} {
		if o.Weights[c] > 0 {
			e.weight[c] = float64(o.Weights[c])
		}
	}
	if e.log == nil {
		e.log = slog.New(discardHandler{})
	}
	batchSched := o.BatchSched
	if batchSched.Policy == 0 && batchSched.Nice == 0 && batchSched.RTPriority == 0 && batchSched.CPUs == nil {
		batchSched = osthread.Demoted
	}
	e.spareP = o.SpareP
	e.pools[poolNormal] = newPool(e, "normal", false, osthread.Sched{})
	e.pools[poolDemoted] = newPool(e, "demoted", !o.NoDemotion, batchSched)
	if o.CriticalLane != nil {
		lane, err := osthread.Start(*o.CriticalLane)
		if err != nil {
			return nil, fmt.Errorf("cpuwork: start the critical lane: %w", err)
		}
		e.critLane = lane
	}
	slots := o.Slots
	detect := o.detect
	if detect == nil {
		detect = budget.Detect
	}
	if slots == 0 {
		b, err := detect()
		if err != nil {
			return nil, fmt.Errorf("cpuwork: detect CPU budget (set Options.Slots to run without it): %w", err)
		}
		slots = b.Slots()
		if _, _, ok := quotaOf(b); ok && o.PaceQuota {
			e.pacer = newPacer(e, b)
			slots = pacedSlots(b)
		}
	}
	e.mu.Lock()
	e.setSlotsLocked(slots)
	e.unlockAndWake()
	if e.pacer != nil {
		ctx, cancel := context.WithCancel(context.Background())
		e.pacerStop, e.pacerDone = cancel, make(chan struct{})
		go func() { defer close(e.pacerDone); e.pacer.run(ctx) }()
	}
	if o.Slots == 0 && o.WatchInterval >= 0 {
		ctx, cancel := context.WithCancel(context.Background())
		e.watchStop, e.watchDone = cancel, make(chan struct{})
		go e.follow(ctx, o.WatchInterval, detect)
	}
	return e, nil
}

// LabelKey is the pprof label key under which tasks run; its value is the
// class name. Profiles can be split with `go tool pprof -tagfocus`.
const LabelKey = "cpuwork.class"

func (e *Executor) warnOnce(msg string, args ...any) {
	e.warned.Do(func() { e.log.Warn(msg, args...) })
}

type discardHandler struct{}

func (discardHandler) Enabled(context.Context, slog.Level) bool  { return false }
func (discardHandler) Handle(context.Context, slog.Record) error { return nil }
func (d discardHandler) WithAttrs([]slog.Attr) slog.Handler      { return d }
func (d discardHandler) WithGroup(string) slog.Handler           { return d }

// follow re-reads the budget and resizes the slot count when it changes.
func (e *Executor) follow(ctx context.Context, interval time.Duration, detect func() (budget.Budget, error)) {
	defer close(e.watchDone)
	if interval == 0 {
		interval = budget.DefaultWatchInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		b, err := detect()
		if err != nil {
			e.log.Warn("cpuwork: re-read CPU budget", "err", err)
			continue
		}
		n := b.Slots()
		if e.pacer != nil {
			e.pacer.reconfigure(b)
			if _, _, ok := quotaOf(b); ok {
				n = pacedSlots(b)
			}
		}
		if n != e.Slots() {
			e.log.Info("cpuwork: CPU budget changed", "cores", b.Cores, "source", string(b.Source), "slots", n)
			e.SetSlots(n)
		}
	}
}

// Slots returns the current number of slots.
func (e *Executor) Slots() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.slots
}

// SetSlots changes the number of slots to n (1..MaxSlots). Growing admits
// queued tasks at once; shrinking lets running tasks finish and admits no
// new ones until fewer than n run. No task is lost or run twice. An executor
// created with Options.Slots 0 also calls this when the budget changes, so
// a manual value lasts until the next budget change.
func (e *Executor) SetSlots(n int) error {
	if n < 1 || n > MaxSlots {
		return fmt.Errorf("cpuwork: SetSlots(%d): out of range 1..%d", n, MaxSlots)
	}
	e.mu.Lock()
	e.setSlotsLocked(n)
	e.unlockAndWake()
	return nil
}

func (e *Executor) setSlotsLocked(n int) {
	delta := n - e.slots
	e.slots = n
	e.lowCap.Store(0)
	if e.spareP {
		e.lowCap.Store(int64(max(1, min(n, runtime.GOMAXPROCS(0)-1))))
	}
	e.free.Add(int64(delta))
	if !e.closed.Load() {
		for _, p := range e.pools {
			p.resizeLocked(n)
		}
	}
	e.dispatchLocked()
}

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
	switch {
	case e.queues[Critical].n > 0:
		c = Critical
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
	w.granted = true
	s := &e.stats[w.class]
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

// waiter is a queued claim on a slot: a blocked Do caller or Checkpoint
// (ready is signalled), or an asynchronous task (sent to a worker).
type waiter struct {
	class      Class
	prev, next *waiter
	queued     bool
	granted    bool
	requeued   bool // a running task that yielded at a Checkpoint
	ready      chan struct{}
	task       *Task
	enq        int64 // now() when queued
	est        int64 // slot time charged to inflight at grant
}

type waitQueue struct {
	head, tail *waiter
	n          int
}

func (q *waitQueue) pushBack(w *waiter) {
	w.prev, w.next, w.queued = q.tail, nil, true
	if q.tail != nil {
		q.tail.next = w
	} else {
		q.head = w
	}
	q.tail = w
	q.n++
}

func (q *waitQueue) pushFront(w *waiter) {
	w.prev, w.next, w.queued = nil, q.head, true
	if q.head != nil {
		q.head.prev = w
	} else {
		q.tail = w
	}
	q.head = w
	q.n++
}

func (q *waitQueue) remove(w *waiter) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		q.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		q.tail = w.prev
	}
	w.prev, w.next, w.queued = nil, nil, false
	q.n--
}

func (q *waitQueue) popFront() *waiter {
	w := q.head
	if w != nil {
		q.remove(w)
	}
	return w
}

// epoch anchors now(); time.Since on a monotonic reading costs one clock
// read (~25 ns here), half of time.Now.
var epoch = time.Now()

func now() int64 { return int64(time.Since(epoch)) }

// sampleEvery: the admission fast path times one task in sampleEvery (a
// clock read costs about half the fast path) and records it with that
// weight; queued tasks are always timed.
const sampleEvery = 8

// taskCtx is the context a task's fn receives. It carries the task's slot,
// so Checkpoint can hand the slot over and a nested Do or For on the same
// executor runs on it instead of waiting for a second slot.
type taskCtx struct {
	context.Context
	e       *Executor
	class   Class
	timed   bool  // slot time is measured (weight 1 if queued, sampleEvery if sampled)
	weight  int64 // histogram weight of this task's timing
	noSlot  bool  // the slot was given up by a Checkpoint whose ctx ended
	start   int64 // now() when the current slot period began (timed tasks)
	stride  int32 // Checkpoint calls between clock reads
	calls   int32
	lastChk int64 // now() at the last clock read in Checkpoint
	lastGs  int64 // now() at the last Gosched
	w       waiter
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
// Errors: ErrClosed after Close; ErrSaturated when c's queue is full; ctx's
// error when ctx ends while the task is queued (fn then never runs); a
// *PanicError when fn panics; otherwise fn's error.
//
// Cost (docs/performance.md): about 50 ns and one 160-byte allocation when
// a slot is free and nobody waits.
func (e *Executor) Do(ctx context.Context, c Class, fn func(context.Context) error) error {
	if !c.valid() {
		return invalidClass(c)
	}
	if fn == nil {
		return errNilFunc
	}
	if tc := taskOf(ctx); tc != nil && tc.e == e && !tc.noSlot {
		return e.inline(ctx, tc, fn)
	}
	if c.runsOnWorker() {
		t, err := e.submit(ctx, c, fn)
		if err != nil {
			return err
		}
		<-t.done
		return t.err
	}
	s := &e.stats[c]
	tc := &taskCtx{Context: ctx, e: e, class: c}
	tc.w.class = c
	if !e.tryAcquire() {
		if err := e.acquireSlow(ctx, tc); err != nil {
			return err
		}
	} else if n, err := e.admitFast(c); err != nil {
		return err
	} else if n%sampleEvery == 0 {
		tc.timed, tc.weight, tc.start = true, sampleEvery, now()
		s.queueWait.record(0, sampleEvery)
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
	if e.closed.Load() {
		s.admitted.Add(^uint64(0))
		s.rejected.Add(1)
		if c.runsOnWorker() {
			e.lowRunning.Add(-1)
		}
		e.release()
		return 0, ErrClosed
	}
	return n, nil
}

// acquireSlow queues tc's waiter and blocks until it is granted a slot or
// ctx ends.
func (e *Executor) acquireSlow(ctx context.Context, tc *taskCtx) error {
	c, s := tc.class, &e.stats[tc.class]
	w := &tc.w
	w.ready = make(chan struct{}, 1)
	w.enq = now()
	e.mu.Lock()
	if e.closed.Load() {
		e.mu.Unlock()
		s.rejected.Add(1)
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		e.mu.Unlock()
		s.canceled.Add(1)
		return err
	}
	if e.queues[c].n >= e.limit[c] {
		e.mu.Unlock()
		s.rejected.Add(1)
		return ErrSaturated
	}
	e.enqueueLocked(w, false)
	e.dispatchLocked()
	e.unlockAndWake()
	if err := e.await(ctx, w); err != nil {
		return err
	}
	tc.timed, tc.weight, tc.start = true, 1, now()
	s.queueWait.record(tc.start-w.enq, 1)
	return nil
}

// await blocks until w, queued by the caller, is granted a slot (nil), is
// failed by Close (ErrClosed) or its ctx ends while it is still queued
// (ctx's error; a slot granted at that moment is given back).
func (e *Executor) await(ctx context.Context, w *waiter) error {
	s := &e.stats[w.class]
	select {
	case <-w.ready:
	case <-ctx.Done():
		e.mu.Lock()
		if w.queued {
			e.removeLocked(w)
			e.mu.Unlock()
			s.canceled.Add(1)
			return ctx.Err()
		}
		e.mu.Unlock()
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
		s.rejected.Add(1)
		return ErrClosed
	}
	w.granted = false
	return nil
}

// ungrant gives back a slot granted to a waiter that will not use it.
func (e *Executor) ungrant(w *waiter) {
	if w.class.runsOnWorker() {
		e.lowRunning.Add(-1)
	}
	if w.est != 0 {
		e.stats[w.class].inflight.Add(-w.est)
		w.est = 0
	}
	e.release()
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
		e.release()
	}
	return err
}

// run executes fn under tc's slot with labels, a trace region and panic
// recovery, then accounts and releases the slot.
func (e *Executor) run(tc *taskCtx, fn func(context.Context) error) (err error) {
	defer e.finish(tc)
	if !e.noLabels {
		e.setLabels(tc)
		defer pprof.SetGoroutineLabels(tc.Context)
	}
	if trace.IsEnabled() {
		defer trace.StartRegion(tc, tc.class.String()).End()
	}
	defer func() {
		if r := recover(); r != nil {
			e.stats[tc.class].panicked.Add(1)
			err = &PanicError{Class: tc.class, Value: r, Stack: debug.Stack()}
		}
	}()
	return fn(tc)
}

func (e *Executor) setLabels(tc *taskCtx) {
	has := false
	pprof.ForLabels(tc.Context, func(string, string) bool { has = true; return false })
	if has {
		pprof.SetGoroutineLabels(pprof.WithLabels(tc.Context, pprof.Labels(LabelKey, tc.class.String())))
		return
	}
	pprof.SetGoroutineLabels(e.labels[tc.class])
}

// finish accounts a finished task and releases its slot.
func (e *Executor) finish(tc *taskCtx) {
	s := &e.stats[tc.class]
	if tc.timed {
		e.charge(tc, now())
	}
	if tc.w.est != 0 {
		s.inflight.Add(-tc.w.est)
		tc.w.est = 0
	}
	s.completed.Add(1)
	if !tc.noSlot {
		if tc.class.runsOnWorker() {
			e.lowRunning.Add(-1)
		}
		e.release()
	}
}

// charge records the slot time of tc's current slot period, ending at end.
func (e *Executor) charge(tc *taskCtx, end int64) {
	s := &e.stats[tc.class]
	d := end - tc.start
	s.slotTime.record(d, uint64(tc.weight))
	s.used.Add(d * tc.weight)
	if tc.weight == 1 {
		s.lastSlotNs.Store(d)
	}
}

// inline runs a nested task on the slot its caller already holds.
func (e *Executor) inline(ctx context.Context, tc *taskCtx, fn func(context.Context) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			e.stats[tc.class].panicked.Add(1)
			err = &PanicError{Class: tc.class, Value: r, Stack: debug.Stack()}
		}
	}()
	e.stats[tc.class].nested.Add(1)
	return fn(ctx)
}

// Task is the handle of an asynchronous task started by Go or TryGo.
type Task struct {
	tc   taskCtx
	fn   func(context.Context) error
	stop func() bool // stops the context watch of a queued task
	done chan struct{}
	err  error
}

// Done is closed when the task has finished or failed.
func (t *Task) Done() <-chan struct{} { return t.done }

// Err returns the task's error once Done is closed (fn's error, a
// *PanicError, ctx's error if it ended while queued, or ErrClosed if Close
// failed the queue), and nil before.
func (t *Task) Err() error {
	select {
	case <-t.done:
		return t.err
	default:
		return nil
	}
}

// Wait blocks until the task finishes and returns its error, or returns
// ctx's error if ctx ends first (the task keeps its place and still runs).
func (t *Task) Wait(ctx context.Context) error {
	select {
	case <-t.done:
		return t.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Class returns the task's class.
func (t *Task) Class() Class { return t.tc.class }

// Go submits fn to run asynchronously on an executor worker under a slot of
// class c and returns its handle; the task's error reaches the submitter
// through Task.Wait or Task.Err. If a slot is free the task starts now,
// otherwise it queues.
//
// Errors (the task is then not started and no handle is returned):
// ErrClosed after Close; ErrSaturated when c's queue is full; ctx's error if
// ctx has already ended. If ctx ends while the task is queued, the task is
// removed and finishes with ctx's error without running.
func (e *Executor) Go(ctx context.Context, c Class, fn func(context.Context) error) (*Task, error) {
	if !c.valid() {
		return nil, invalidClass(c)
	}
	if fn == nil {
		return nil, errNilFunc
	}
	return e.submit(ctx, c, fn)
}

// TryGo is Go without queuing: it starts fn only if a slot is free now and
// no task is queued, and returns ErrSaturated otherwise.
func (e *Executor) TryGo(ctx context.Context, c Class, fn func(context.Context) error) (*Task, error) {
	if !c.valid() {
		return nil, invalidClass(c)
	}
	if fn == nil {
		return nil, errNilFunc
	}
	s := &e.stats[c]
	if e.closed.Load() {
		s.rejected.Add(1)
		return nil, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		s.canceled.Add(1)
		return nil, err
	}
	if !e.tryAcquireFor(c) {
		s.rejected.Add(1)
		return nil, ErrSaturated
	}
	t := e.newTask(ctx, c, fn)
	if err := e.startFast(t); err != nil {
		return nil, err
	}
	return t, nil
}

func (e *Executor) newTask(ctx context.Context, c Class, fn func(context.Context) error) *Task {
	t := &Task{fn: fn, done: make(chan struct{})}
	t.tc = taskCtx{Context: ctx, e: e, class: c}
	t.tc.w.class, t.tc.w.task = c, t
	return t
}

// startFast hands a task that already holds a slot to a worker.
func (e *Executor) startFast(t *Task) error {
	s := &e.stats[t.tc.class]
	n, err := e.admitFast(t.tc.class)
	if err != nil {
		return err
	}
	if n%sampleEvery == 0 {
		t.tc.timed, t.tc.weight, t.tc.start = true, sampleEvery, now()
		s.queueWait.record(0, sampleEvery)
	}
	e.pools[t.tc.class.pool()].runq <- t
	return nil
}

func (e *Executor) submit(ctx context.Context, c Class, fn func(context.Context) error) (*Task, error) {
	s := &e.stats[c]
	if e.closed.Load() {
		s.rejected.Add(1)
		return nil, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		s.canceled.Add(1)
		return nil, err
	}
	t := e.newTask(ctx, c, fn)
	if e.tryAcquireFor(c) {
		if err := e.startFast(t); err != nil {
			return nil, err
		}
		return t, nil
	}
	if ctx.Done() != nil {
		t.stop = context.AfterFunc(ctx, func() { e.cancelQueued(t) })
	}
	t.tc.w.enq = now()
	e.mu.Lock()
	var err error
	switch {
	case e.closed.Load():
		err = ErrClosed
	case e.queues[c].n >= e.limit[c]:
		err = ErrSaturated
	}
	if err != nil {
		e.mu.Unlock()
		if t.stop != nil {
			t.stop()
		}
		s.rejected.Add(1)
		return nil, err
	}
	e.enqueueLocked(&t.tc.w, false)
	e.dispatchLocked()
	e.unlockAndWake()
	return t, nil
}

// cancelQueued fails a queued task whose context ended.
func (e *Executor) cancelQueued(t *Task) {
	e.mu.Lock()
	if !t.tc.w.queued {
		e.mu.Unlock()
		return
	}
	e.removeLocked(&t.tc.w)
	e.mu.Unlock()
	e.stats[t.tc.class].canceled.Add(1)
	t.err = t.tc.Context.Err()
	close(t.done)
}

func (e *Executor) runTask(t *Task) {
	if t.stop != nil {
		t.stop()
	}
	tc := &t.tc
	if tc.w.granted { // it waited in the queue
		s := &e.stats[tc.class]
		tc.timed, tc.weight, tc.start = true, 1, now()
		s.queueWait.record(tc.start-tc.w.enq, 1)
		tc.w.granted = false
	}
	t.err = e.run(tc, t.fn)
	close(t.done)
}

// Close stops admission: from now on every submission returns ErrClosed.
// Queued tasks keep being admitted as slots free up until ctx ends; then
// the ones still queued fail with ErrClosed (their submitters get it from
// Do or Task.Wait). Close waits for running tasks up to ctx, stops the
// workers once they are done, and returns nil if everything finished or
// ctx's error if not. Calling Close again waits again.
func (e *Executor) Close(ctx context.Context) error {
	e.mu.Lock()
	e.closed.Store(true)
	e.mu.Unlock()
	e.closeOnce.Do(func() {
		if e.watchStop != nil {
			e.watchStop()
			<-e.watchDone
		}
		if e.pacerStop != nil {
			e.pacerStop() // resumes admission so queued batch work can drain
			<-e.pacerDone
		}
	})
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !e.idle() {
		select {
		case <-ctx.Done():
			e.failQueued()
			// Tasks admitted just before Close may still be on their way
			// to a worker: stop the workers only once nothing runs.
			go func() {
				for !e.idle() {
					time.Sleep(time.Millisecond)
				}
				e.stopWorkers()
			}()
			return ctx.Err()
		case <-tick.C:
		}
	}
	e.stopWorkers()
	for _, p := range e.pools {
		p.wg.Wait()
	}
	if e.critLane != nil {
		return e.critLane.Close(ctx)
	}
	return nil
}

// idle reports whether no task is queued or running.
func (e *Executor) idle() bool {
	if e.waiting.Load() != 0 {
		return false
	}
	for c := range e.stats {
		s := &e.stats[c]
		if s.admitted.Load() != s.completed.Load() {
			return false
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.waiting.Load() == 0
}

// failQueued fails every queued waiter with ErrClosed.
func (e *Executor) failQueued() {
	e.mu.Lock()
	var tasks []*Task
	for c := range e.queues {
		for w := e.queues[c].popFront(); w != nil; w = e.queues[c].popFront() {
			e.dequeuedLocked(Class(c))
			if w.task != nil && !w.requeued {
				tasks = append(tasks, w.task)
			} else {
				w.ready <- struct{}{} // granted stays false: closed out
			}
		}
	}
	e.mu.Unlock()
	for _, t := range tasks {
		if t.stop != nil {
			t.stop()
		}
		e.stats[t.tc.class].rejected.Add(1)
		t.err = ErrClosed
		close(t.done)
	}
}

func (e *Executor) stopWorkers() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, p := range e.pools {
		p.stopLocked()
	}
}
