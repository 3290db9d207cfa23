package cpuwork

import (
	"context"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cpuwork/cpuwork/internal/admission"
	"github.com/cpuwork/cpuwork/internal/netwatch"

	"github.com/cpuwork/cpuwork/internal/goroutine"
)

// Checkpoint marks a safe point in a long CPU-bound loop of a task: call
// it every few microseconds to a millisecond of work, on the goroutine
// that runs fn, with the ctx fn received. When a more urgent task (or one
// of its class due earlier) waits for a slot, the task hands its slot over
// and queues again at its own place; when goroutines wait for a P, timers
// are due, or a request arrived on a WatchListener, it yields the P. It
// costs a few nanoseconds when nobody waits. On a goroutine that runs no
// task, and while For runs the task's chunks on helpers, it only yields
// the P. It returns ctx's error once ctx has ended, or ErrClosed when the
// executor closed while the task waited for its slot back: the task should
// then return. A nil ctx panics.
func Checkpoint(ctx context.Context) error {
	// The fast path (a task that holds its slot alone, nobody to hand
	// the slot to, not yet time to read the clock): the table lookup, a
	// few loads and a counter, no further call.
	// The calling goroutine's task (runningTask, written out: the
	// goroutine's entry is most often the first of its bucket).
	g := goroutine.ID()
	t, ok := running.First(g)
	if !ok {
		t, _ = running.Lookup(g)
	}
	if t == nil || ctx == nil || t.shared != 0 || t.noSlot != holdsSlot {
		return checkpointSlow(ctx, t)
	}
	e := t.e
	if e.g.Waiting() && e.g.Behind(admission.Class(t.class), t.due()) {
		return t.checkpoint(ctx)
	}
	t.calls++
	if t.calls < t.stride {
		return nil
	}
	return t.check(ctx)
}

// due is the task's rank in its class (internal/admission: its due, plus
// its key's lead), computed from its context the first time it is
// needed.
func (t *task) due() int64 {
	if r, ok := t.w.Ranked(); ok {
		return r
	}
	return t.rank()
}

// rank computes due's rank the first time; kept out of line so that due
// inlines into Checkpoint's fast path.
//
//go:noinline
func (t *task) rank() int64 { return t.e.g.Rank(t.ctx, &t.w) }

// handOver reports whether the task should hand its slot over now: more
// urgent work waits, or work of its class due earlier, or (Batch and
// Background) quota pacing has paused its class.
func (t *task) handOver() bool {
	return t.e.g.Behind(admission.Class(t.class), t.due())
}

// checkpointSlow is Checkpoint for every case but a task that holds its
// slot alone: t is the calling goroutine's task, or nil.
func checkpointSlow(ctx context.Context, t *task) error {
	mustCtx(ctx)
	if t == nil || t.shared != 0 {
		return checkpointFree(ctx)
	}
	return t.checkpoint(ctx) // also the slot-lost case
}

// checkpoint is Checkpoint for the goroutine that runs t.
func (t *task) checkpoint(ctx context.Context) error {
	if t.noSlot != holdsSlot { // lost at an earlier Checkpoint: nothing to hand over
		checkpointFree(ctx)
		return t.noSlot.err(ctx)
	}
	if t.handOver() {
		if err := t.e.yield(ctx, t); err != nil {
			return err
		}
	}
	t.calls++
	if t.calls < t.stride {
		return nil
	}
	return t.check(ctx)
}

const (
	sampleGap     = 100 * time.Microsecond // runnable goroutines are read at most this often
	maxCheckGap   = 100 * time.Microsecond // the clock is read at least this often
	maxStride     = 1 << 20
	runnableName  = "/sched/goroutines/runnable:goroutines"
	defaultStride = 1
)

// defaultCheckpointYield is how long, at most, a task that calls
// Checkpoint runs between the P yields it makes while every P is busy
// (docs/performance.md measures the interval's cost).
const defaultCheckpointYield = 40 * time.Microsecond

// setCheckpointYield sets Checkpoint's yield interval (0 means
// defaultCheckpointYield, negative never on a timer) and
// the clock-read gaps that keep it: a quarter to half of it, at most
// maxCheckGap.
func (e *Executor) setCheckpointYield(d time.Duration) {
	if d == 0 {
		d = defaultCheckpointYield
	}
	e.yieldGap, e.checkMax = int64(d), int64(min(d/2, maxCheckGap))
	if d < 0 {
		e.yieldGap, e.checkMax = 0, int64(maxCheckGap)
	}
	e.checkMax = max(e.checkMax, int64(time.Microsecond))
	e.checkMin = e.checkMax / 2
	// The clock is read every checkMin..checkMax: yielding at the first
	// read at least yieldGap - checkMin after the last yield spaces the
	// yields yieldGap apart on average (between 3/4 and 5/4 of it for the
	// default gaps), where waiting for a full yieldGap spaced them 1 to
	// 1.5 yieldGap apart.
	e.yieldAfter = 0
	if e.yieldGap > 0 {
		e.yieldAfter = max(e.yieldGap-e.checkMin, 1)
	}
}

// check is Checkpoint's periodic part: adapt the stride, then yield the P
// if goroutines are runnable or timers may be due.
func (t *task) check(ctx context.Context) error {
	t.calls = 0
	n := now()
	gap := n - t.lastChk
	e := t.e
	switch {
	case t.lastChk == 0 || t.stride == 0:
		t.stride = defaultStride
	case gap < e.checkMin && t.stride < maxStride:
		t.stride *= 2
	case gap > e.checkMax && t.stride > 1:
		t.stride /= 2
	}
	t.lastChk = n
	if t.lastGs == 0 {
		// The task's first clock read: when its P last yielded is not
		// known (the goroutine's previous task may have run up to a yield
		// interval since its own last yield), so the interval counts as
		// elapsed: a loop of short tasks yields as often as one long one.
		t.lastGs = n - e.yieldAfter
	}
	if t.acct != nil {
		t.acct.check()
	}
	runnable, busy := schedNow(n)
	switch {
	case busy && !runnable && netwatch.Arrived(n):
		// A request arrived on a watched connection (WatchListener) and
		// no P will poll the network soon: park so this P does, with the
		// slot given up meanwhile so the request's task can take it.
		if err := e.parkOffSlot(ctx, t); err != nil {
			return err
		}
	case busy && (runnable || (e.yieldAfter > 0 && n-t.lastGs >= e.yieldAfter)):
		t.pause(yieldP)
	}
	if e.g.OverCommitted() && t.noSlot == holdsSlot && t.shared == 0 {
		// More tasks run than there are slots (the fractional quota's
		// extra slot closed, or SetSlots shrank): hand this one back.
		if err := e.yield(ctx, t); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// The sampled scheduler state is shared by all tasks: one of them reads
// the runtime metrics per sampleGap and the others use its result.
//
// Checkpoint yields the P only when every P is busy. runtime.Gosched calls
// wakep (goschedImpl in runtime/proc.go): with a P idle, each Gosched wakes
// a thread that spins looking for work and burns CPU — under a CFS quota,
// quota — for nothing, since the idle P's thread already runs the due
// timers (it sleeps in netpoll until the earliest one) and any runnable
// goroutine.
var sampler struct {
	last     atomic.Int64 // now() of the last read
	runnable atomic.Int64 // runnable goroutines at that read; -1 if unsupported
	busy     atomic.Bool  // every P ran a goroutine at that read
	mu       sync.Mutex
	sample   []metrics.Sample
}

const (
	runningName    = "/sched/goroutines/running:goroutines"
	gomaxprocsName = "/sched/gomaxprocs:threads"
)

func init() {
	sampler.sample = []metrics.Sample{{Name: runnableName}, {Name: runningName}, {Name: gomaxprocsName}}
	metrics.Read(sampler.sample)
	sampler.busy.Store(true)
	if sampler.sample[0].Value.Kind() != metrics.KindUint64 {
		sampler.runnable.Store(-1) // Go < 1.26: no such metric
	}
}

// schedNow reports whether goroutines wait for a P and whether every P is
// busy, reading the metrics at most every sampleGap. Where the runnable
// count is unsupported (Go < 1.26) it answers (true, true) once per
// sampleGap so callers yield at that rate.
func schedNow(t int64) (runnable, busy bool) {
	last := sampler.last.Load()
	if time.Duration(t-last) < sampleGap || !sampler.last.CompareAndSwap(last, t) {
		return sampler.runnable.Load() > 0, sampler.busy.Load()
	}
	if sampler.runnable.Load() < 0 {
		return true, true
	}
	if !sampler.mu.TryLock() {
		return false, sampler.busy.Load()
	}
	metrics.Read(sampler.sample)
	n := int64(sampler.sample[0].Value.Uint64())
	b := true
	if s := sampler.sample; s[1].Value.Kind() == metrics.KindUint64 && s[2].Value.Kind() == metrics.KindUint64 {
		b = s[1].Value.Uint64() >= s[2].Value.Uint64()
	}
	sampler.mu.Unlock()
	sampler.runnable.Store(n)
	sampler.busy.Store(b)
	return n > 0, b
}

// yieldP is how Checkpoint yields the P (runtime.Gosched; a counter in
// tests).
var yieldP = runtime.Gosched

// pause runs wait (a Gosched or a park for the network) with the task's
// accounting paused around it, and restarts the yield interval.
func (t *task) pause(wait func()) {
	if t.accounted {
		ta := t.acct
		ta.pause(gapGo)
		wait()
		ta.resume()
	} else {
		wait()
	}
	t.lastGs = now()
}

func checkpointFree(ctx context.Context) error {
	t := now()
	switch runnable, busy := schedNow(t); {
	case busy && !runnable && netwatch.Arrived(t):
		netwatch.Park()
	case runnable && busy:
		runtime.Gosched()
	}
	return ctx.Err()
}

// yield hands t's slot over and queues t again at its due's place in
// its class (so it keeps its place in line), returning when t holds a
// slot again, or an error if ctx ended or the executor closed meanwhile
// (t then holds no slot). The slot goes back through the granter's
// release, which hands it to the waiter the queue policy picks (internal/admission).
func (e *Executor) yield(ctx context.Context, t *task) error {
	w := &t.w
	end := now()
	p := t.period(end)
	t.due() // its place in line
	if !e.g.Requeue(w, &p, false) {
		return nil // closing: finish rather than queue; or someone else yielded first
	}
	e.stats[t.class].yields.Add(1)
	e.stats[t.class].slotTime.record(p.Slot, uint64(p.Weight))
	onWorker := e.leaveSlot(t)
	return e.awaitSlotBack(ctx, t, onWorker)
}

// awaitSlotBack waits for t, queued again off its slot (a hand-over or
// a park), to hold a slot again, its account's time meanwhile counted as
// queue wait, and returns as slotBack does.
func (e *Executor) awaitSlotBack(ctx context.Context, t *task, onWorker bool) error {
	var ta *taskAccount
	if t.accounted {
		ta = t.acct
		ta.pause(gapQueue)
	}
	r := e.g.Await(ctx.Done(), &t.w)
	ta.resume()
	return e.slotBack(ctx, t, onWorker, r)
}

// parkOffSlot is Checkpoint's park for the network (netwatch.Park) with
// t's slot given up for the park: the request that arrived finds a free
// slot instead of queueing behind a parked task, and the park's idle P
// costs the task's class no slot. After the park t takes a slot again
// if one is free and nobody waits, else it queues at its due's place in
// its class as at a hand-over (yield), with the same errors. A task that
// cannot give its slot up (For helpers share it, or the executor is
// closing) parks holding it.
func (e *Executor) parkOffSlot(ctx context.Context, t *task) error {
	if e.g.Closed() || t.shared != 0 || t.noSlot != holdsSlot {
		t.pause(netwatch.Park)
		return nil
	}
	w := &t.w
	if t.weight != 0 {
		e.charge(t, now())
	}
	e.releaseSlot(w)
	onWorker := e.leaveSlot(t)
	t.pause(netwatch.Park)
	w.SetArrival(now()) // its wait for the slot starts after the park
	if e.g.TryAcquire(admission.Class(t.class)) {
		return e.slotBack(ctx, t, onWorker, admission.WaitGranted)
	}
	e.g.Requeue(w, nil, false)
	return e.awaitSlotBack(ctx, t, onWorker)
}

// leaveSlot marks t, which gave its slot up and will wait for one again,
// and lends its worker (a Go task's) to its pool meanwhile: the slot it
// freed may go to an asynchronous task, which needs a worker to run on.
// It reports whether t runs on a worker.
func (e *Executor) leaveSlot(t *task) (onWorker bool) {
	t.yielded = true
	t.offAt = now()
	onWorker = t.w.Kind() == admission.KindTask
	if onWorker {
		e.pools[t.class.pool()].lendSpare()
	}
	return onWorker
}

// slotBack ends a wait for a slot given up at a Checkpoint (yield,
// parkOffSlot): r is the wait's outcome. On a grant t holds a slot again
// and its new slot period begins; otherwise t holds none (lostByClose
// after Close, lostByCtx when ctx ended) and slotBack returns ErrClosed
// or ctx's error.
func (e *Executor) slotBack(ctx context.Context, t *task, onWorker bool, r admission.WaitResult) error {
	t.offSlot += now() - t.offAt
	if onWorker {
		e.pools[t.class.pool()].returnSpare()
	}
	switch r {
	case admission.WaitGranted:
	case admission.WaitCanceled:
		t.noSlot = lostByCtx
		return ctx.Err()
	default: // a task queued again is never refused: only Close fails it
		t.noSlot = lostByClose
		return ErrClosed
	}
	e.timeQueued(t)
	return nil
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

// charge records the slot time of t's current slot period, ending at end.
func (e *Executor) charge(t *task, end int64) {
	p := t.period(end)
	e.stats[t.class].slotTime.record(p.Slot, uint64(p.Weight))
	e.g.Record(p)
}
