package cpuwork

import (
	"context"
	"runtime/debug"
	"runtime/trace"
	"time"
	"unsafe"

	"github.com/cpuwork/cpuwork/internal/admission"
	"github.com/cpuwork/cpuwork/internal/goroutine"
)

// The admission fast path times one task in 1, 2, 4, ... up to
// maxTimingStride (a clock read costs about a third of the fast path) and
// records it with that weight; queued tasks likewise (timeQueued). The stride
// adapts per class so that timed tasks start about every
// timingGapMin..timingGapMax: every task is timed at low rates, one in
// maxTimingStride at millions per second.
const (
	maxTimingStride = 64
	timingGapMin    = 100 * time.Microsecond
	timingGapMax    = time.Millisecond
)

// now is the executor's clock, in nanoseconds (admission.Now).
func now() int64 { return admission.Now() }

// timeQueued marks t as granted its slot after queuing since t.w.Enq
// and times it as the fast path does, one in the class's stride (drawn
// from the low bits of its arrival time) with that weight; a task with a
// latency target is always timed (its end decides EndedLate), and so are
// a keyed task (its slot time is its key's) and every task while
// SlowWait accounting is on (it needs the wait).
func (e *Executor) timeQueued(t *task) {
	s := &e.stats[t.class]
	t.waited, t.weight = true, 0
	mask := s.timingMask.Load()
	weight := mask + 1
	if w := &t.w; w.HasTarget() || w.Keyed() || e.sample.slowWait > 0 {
		weight = 1
	} else if (uint64(w.Arrival())>>6)&mask != 0 {
		return
	}
	t.weight, t.start = uint8(weight), now()
	s.queueWait.record(t.start-t.w.Arrival(), weight)
	s.adaptStride(mask, t.start)
}

// adaptStride adapts class s's timing stride (mask+1) to the gap since
// its last timed start, at (racy between tasks of the class by design:
// an estimate).
func (s *classStats) adaptStride(mask uint64, at int64) {
	gap := time.Duration(at - s.timedAt.Swap(at))
	switch {
	case gap < timingGapMin && mask < maxTimingStride-1:
		s.timingMask.Store(mask<<1 | 1)
	case gap > timingGapMax && mask > 0:
		s.timingMask.Store(mask >> 1)
	}
}

// task is the state of one task while it is submitted and runs (a Do, a
// Go task, a For loop's caller): its slot, its place in line (its waiter)
// and Checkpoint's counters. It is not a context: fn receives the
// submitter's ctx unchanged, and the goroutine that runs fn finds its task
// in the running table, so Checkpoint can hand the slot over and a nested
// Do or For on the same executor runs on it. A Do on its own goroutine
// uses the goroutine's running-table entry's own record; any other task
// has one of its own (newRecord, a Task's).
type task struct {
	// Checkpoint's fast path reads e, stride, calls, shared, class and
	// noSlot: they come first, in one cache line.
	e      *Executor
	stride int32 // Checkpoint calls between clock reads
	calls  int32
	// shared counts For loops running chunks of this task on helper
	// goroutines: while it is non-zero, Checkpoint on the task's
	// goroutine only yields the P (the loop hands the slot over between
	// its chunks). A For helper's own task has it set for good. Only
	// the task's goroutine reads and writes it.
	shared int32
	class  Class
	// noSlot is set when a Checkpoint gave the slot up and did not get it
	// back: lostByCtx (its ctx ended) or lostByClose (ErrClosed); or when
	// a For that is the whole task gave it back for its helpers' last
	// chunks (handedBack).
	noSlot lostSlot
	ctx    context.Context // the submitter's: fn receives it
	// outer is the task its goroutine ran before this one began (a task
	// of another executor, or one of e whose slot was lost), while this
	// one runs (enter); pushed says t's goroutine ran it (its entry
	// points back to it at leave). inherit is the innermost task of a
	// submitter that waits for t (a Do run on a worker or the critical
	// lane): t's outer when its goroutine ran none.
	outer, inherit *task
	pushed         bool
	// acct is the task's account while it is accounted (account.go).
	acct    *taskAccount
	g       uintptr // the goroutine that runs it, while it runs
	start   int64   // now() when the current slot period began (timed tasks)
	lastChk int64   // now() at the last clock read in Checkpoint
	lastGs  int64   // now() at the last Gosched
	// offSlot is the time t spent off its slot at Checkpoints (a
	// hand-over, a park for the network, and the wait for the slot
	// back), the last of them from offAt.
	offSlot, offAt int64
	entry          int32 // its goroutine's entry in the running table
	// weight is the histogram weight of this task's slot-time
	// measurement: 1 for a task that queued (every one is timed), the
	// stride it was timed at on the fast path (timeFast), 0 when it is
	// not timed.
	weight uint8
	// waited: the task queued for its slot (its slot period is timed
	// exactly, from its grant).
	waited bool
	// accounted: the task is chosen to be accounted (set at admission on
	// the fast path, else at run's start); from run's start until finish
	// where its time goes is being recorded (account.go).
	accounted bool
	// yielded: the task handed its slot over at a Checkpoint at least
	// once (its slot periods are parts of its run time).
	yielded bool
	// entered: its goroutine's running-table entry points to it (enter
	// or claimOwn, until leave).
	entered bool
	// onCaller: fn runs on the submitter's goroutine (a Do not on the
	// critical lane), which keeps its own profiler labels.
	onCaller bool
	w        admission.Waiter
}

// reset makes t a new task of class c of e submitted with ctx; the
// wake-up channel of an earlier use is kept (it is empty).
func (t *task) reset(ctx context.Context, e *Executor, c Class) {
	s := t.w.Spare()
	*t = task{ctx: ctx, e: e, class: c}
	t.w.Reuse(s, admission.Class(c))
}

// running maps each goroutine that runs a task (fn of a Do, a Go task on
// its worker, a For helper's chunks) to its innermost task; that task's
// outer link leads to the others (of other executors, or of e with a lost
// slot).
var running goroutine.Table[task]

// runningTask returns the innermost task the calling goroutine runs, or
// nil.
func runningTask() *task { t, _ := running.Lookup(goroutine.ID()); return t }

// claimed resets t, the record of the entry i goroutine g just claimed,
// to a task of class c of e submitted with ctx, registered as g's
// running task, and returns it.
func (t *task) claimed(g uintptr, i int32, ctx context.Context, e *Executor, c Class) *task {
	t.reset(ctx, e, c)
	t.g, t.entry, t.entered = g, i, true
	return t
}

// enter makes t the calling goroutine's innermost task until leave. The
// task it ran before becomes t.outer; a goroutine that ran none gets an
// entry, and t.outer is t.inherit: the tasks of a submitter that waits,
// holding their slots idle, while t runs on a worker or the critical lane,
// so that a Do of their executor inside t runs on their slot.
func (t *task) enter() {
	t.g, t.entered = goroutine.ID(), true
	outer, i := running.Enter(t.g, t)
	t.entry, t.pushed, t.outer = i, outer != nil, outer
	if outer == nil {
		t.outer = t.inherit
	}
}

// leave ends t as the calling goroutine's innermost task: the task it was
// pushed on becomes the innermost again, or the entry is freed. It is the
// last use of an entry's own record: another goroutine may claim it.
func (t *task) leave() {
	g, i, outer := t.g, t.entry, t.outer
	if !t.pushed {
		outer = nil
	}
	// ctx goes too: an entry's own record lives as long as the program
	// and would keep what the last task's ctx holds (its key, its
	// request) until the entry's next claim.
	t.outer, t.g, t.entered, t.pushed, t.ctx = nil, 0, false, false, nil
	running.Leave(g, i, outer)
}

// of returns the innermost task of e among t and its outer tasks, or nil.
func (t *task) of(e *Executor) *task {
	for ; t != nil; t = t.outer {
		if t.e == e {
			return t
		}
	}
	return nil
}

// Do waits for a slot of class c, runs fn(ctx), releases the slot and
// returns fn's error. Critical and Interactive tasks run on the caller's
// goroutine (its thread, stack and profiler labels stay); Batch and
// Background tasks run on an executor worker while Do waits. A Do or For
// on e inside fn runs on the slot fn holds; a goroutine fn starts holds
// none, so fn must not wait for that goroutine's Do (fan out with For).
//
// Errors: ErrClosed after Close; an error matching ErrSaturated (the bare
// sentinel for a full queue, wrapped with the reason for MaxQueueWait or
// ErrDeadline); ctx's error if ctx is done before fn runs; a *PanicError
// when fn panics; otherwise fn's error. A nil ctx or *Executor panics.
// No allocation for a Critical or Interactive task, queued or not.
func (e *Executor) Do(ctx context.Context, c Class, fn func(context.Context) error) error {
	if r := e.rec; r != nil {
		return e.doRecorded(ctx, c, fn, r)
	}
	return e.do(ctx, c, 1, fn)
}

// do is Do for a task expected to run on span slots at once (a For
// loop's caller: the queue counts its slot time as span times its run
// time; waiter.slotWork).
func (e *Executor) do(ctx context.Context, c Class, span int, fn func(context.Context) error) error {
	if !e.argsOK(ctx, c, fn) {
		return e.badArgs(ctx, c, fn)
	}
	g := goroutine.ID()
	lane := c == Critical && e.critLane != nil
	// A goroutine that runs no task runs or queues its task with its
	// entry's own record, claimed in the same pass as the lookup (own).
	var cur, own *task
	var entry int32
	if c.runsOnWorker() || lane {
		cur, _ = running.Lookup(g)
	} else {
		cur, own, entry = running.LookupOrClaim(g)
	}
	// A nested call (this goroutine holds a slot of e) runs on that
	// slot: counted in Nested only, whether it runs or its ctx has
	// ended, never as a submission (ClassStats.Nested).
	if t := cur.of(e); t != nil && t.noSlot == holdsSlot {
		return e.inline(ctx, t, fn)
	}
	if err := ctx.Err(); err != nil { // one rule for every class: a done ctx never runs fn
		if own != nil {
			running.Leave(g, entry, nil)
		}
		e.stats[c].Canceled.Add(1)
		return err
	}
	if c.runsOnWorker() {
		// fn runs on a worker while this goroutine waits: its tasks'
		// slots are the worker's to run nested calls on (task.inherit).
		t, err := e.submit(ctx, c, span, fn, cur)
		if err != nil {
			return err
		}
		<-t.done
		return t.err
	}
	if cur == nil && !lane && e.g.TryAcquire(admission.Class(c)) {
		// The fast path: a free slot and nobody queued. The task's
		// record is the goroutine's running-table entry's own, and its
		// goroutine is registered with it already.
		var t *task
		if own != nil {
			t = own.claimed(g, entry, ctx, e, c)
		} else {
			t = newRecord(ctx, e, c)
		}
		t.w.SetSpan(span)
		t.onCaller = true
		if err := e.admitFastTask(t, g); err != nil {
			if t.entered {
				t.leave()
			}
			return err
		}
		return e.run(t, fn) // t is not touched after: another goroutine may own it
	}
	// The queued path. A goroutine that runs no task queues with its
	// entry's own record too (registered while it waits, which only it
	// reads), so that a queued task allocates nothing; a nested or lane
	// task, or one whose bucket is full, has a record of its own.
	var t *task
	if own != nil {
		t = own.claimed(g, entry, ctx, e, c)
	}
	if t == nil {
		t = newRecord(ctx, e, c)
	}
	t.w.SetSpan(span)
	t.onCaller = !lane
	if lane {
		t.inherit = cur // this goroutine waits while fn runs on the lane
	}
	if err := e.acquireSlow(ctx, t); err != nil {
		if t.entered {
			t.leave()
		}
		return err
	}
	if lane {
		return e.runOnLane(ctx, t, fn)
	}
	return e.run(t, fn)
}

// acquireSlow queues t's waiter and blocks until it is granted a slot,
// is refused, or ctx ends (Granter.Admit).
func (e *Executor) acquireSlow(ctx context.Context, t *task) error {
	if err := e.g.Admit(ctx, &t.w); err != nil {
		return err
	}
	e.timeQueued(t)
	return nil
}

// releaseSlot gives a slot held for class c back through the granter's one
// release (a task finished, a task handed its slot over at a Checkpoint,
// a For helper stopped, a granted waiter was cancelled, an admission was
// undone by Close).
func (e *Executor) releaseSlot(w *admission.Waiter) { e.g.Release(w, nil) }

// run executes fn under t's slot on the calling goroutine, which runs t
// meanwhile (the running table), with labels, a trace region and panic
// recovery, then accounts and releases the slot.
func (e *Executor) run(t *task, fn func(context.Context) error) (err error) {
	if a := e.acct; a != nil {
		var wait int64
		if t.waited {
			if t.weight != 0 {
				wait = t.start - t.w.Arrival()
			}
			t.accounted = a.pickQueued(wait, e.stats[t.class].AvgSlotNs.Load())
		}
		if t.accounted {
			n := now()
			if t.waited && t.weight == 0 {
				wait = n - t.w.Arrival() // not timed: its wait ends now
			}
			t.acct = a.begin(t.class, n-wait, n)
		}
	}
	if !t.entered {
		t.enter()
	}
	var restore unsafe.Pointer
	if !e.noLabels {
		if restore = goroutine.ProfLabels(); restore == nil && t.onCaller {
			goroutine.SetProfLabels(e.classLabels[t.class]) // TaskLabels' common case, in line
		} else {
			goroutine.TaskLabels(restore, t.ctx, e.classLabels[t.class], t.onCaller, labelKey, t.class.String())
		}
	}
	returned := false
	defer e.end(t, restore, &err, &returned) // one deferred call: recover, labels, finish
	if trace.IsEnabled() {
		defer trace.StartRegion(t.ctx, t.class.String()).End()
	}
	err = fn(t.ctx)
	returned = true
	return err
}

// end is run's deferred call: a panic of fn becomes *err (a
// *PanicError), the goroutine's labels are put back (restore) and t
// finishes. It recovers itself (recover works only in the deferred
// function; recoverTask is the same rule for the other paths), and only
// when fn did not return (*returned false: a panic or runtime.Goexit),
// so that a task that returns makes no call into the runtime for it.
func (e *Executor) end(t *task, restore unsafe.Pointer, err *error, returned *bool) {
	if !*returned {
		if r := recover(); r != nil {
			e.stats[t.class].panicked.Add(1)
			*err = &PanicError{Class: t.class, Value: r, Stack: debug.Stack()}
		}
	}
	if !e.noLabels {
		goroutine.SetProfLabels(restore)
	}
	e.finish(t)
}

// finish accounts t, releases its slot and ends t on its goroutine (the
// running table).
func (e *Executor) finish(t *task) {
	s := &e.stats[t.class]
	var end int64
	var p admission.SlotPeriod
	if t.weight != 0 || t.w.Keyed() {
		// The estimators see this slot period before the slot goes to
		// the next task; the histograms are written after, so that the
		// slot does not wait for them. A keyed task's charge ends with
		// its last period.
		p.W = &t.w
		if t.weight != 0 {
			end = now()
			p = t.period(end)
		}
		p.Last = true
		e.g.Record(p)
	}
	s.Completed.Inc(t.g)
	if t.noSlot == holdsSlot {
		var keep *admission.Keep // a task on a worker: the worker's next task
		if tk, ok := t.w.Task().(*Task); ok {
			keep = &tk.keep
		}
		e.g.Release(&t.w, keep)
	} else if e.g.Closed() {
		e.checkDrained()
	}
	if t.weight != 0 {
		s.slotTime.record(p.Slot, uint64(p.Weight))
		if t.w.Late(end) {
			s.endedLate.Add(1)
		}
	}
	if t.accounted {
		e.acct.end(t.acct, t.class, now())
		t.accounted, t.acct = false, nil
	}
	t.leave() // the last use of t: an entry's own record may be claimed at once
}

// period is t's current slot period, ending at end, for the estimators
// (Granter.Record): a task given a run time that yielded ran it over
// several periods, so none of them scales given run times.
func (t *task) period(end int64) admission.SlotPeriod {
	return admission.SlotPeriod{W: &t.w, Slot: end - t.start, Weight: t.weight, Waited: t.waited, Split: t.yielded}
}

// owner is the executor as the granter's admission.Owner.
type owner Executor

// Released follows each release of a slot and each cancellation of a
// queued waiter: after Close it signals a drained executor, and it lets
// the fractional pacer re-check the quota.
func (o *owner) Released() {
	e := (*Executor)(o)
	if e.g.Closed() {
		e.checkDrained()
	}
	if p := e.frac.Load(); p != nil {
		p.MaybeStep()
	}
}
