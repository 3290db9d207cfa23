package cpuwork

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"
)

// Which waiting task gets the next slot (the queue policy):
//
//  1. Class. Critical first; then Interactive or Batch by weighted fair
//     queuing on measured slot time (shares below); Background last, with
//     a starvation guard (shed.go).
//  2. Inside a class, earliest due first; ties in arrival order. A task's
//     due is its arrival plus its latency target, the smallest of:
//     WithTarget's Latency (from the WithTarget call), the ctx deadline
//     (the deadline itself), and ClassOptions.LatencyTarget of the class (from
//     the submission). A task with none of these is due at its arrival, so
//     a class whose tasks carry no targets is served first come, first
//     served (FIFO): for the light-tailed size mixes of request serving it
//     is close to tail-optimal (Wierman and Zwart, "Is tail-optimal
//     scheduling possible?", Operations Research 2012). With targets it is
//     earliest-deadline-first, which is also FCFS on a virtual arrival
//     time: a request with a target d later than another's may be passed
//     by requests arriving up to d after it, never by later ones (the
//     bounded passing of Nudge, Grosof et al., SIGMETRICS 2021, and
//     γ-Boost, arXiv 2404.08826). No task waits forever: every due is
//     finite.
//  3. Keeping its place. A task that hands its slot over at a Checkpoint,
//     and a For loop's helpers, queue again with the due they had, so a
//     large request split into parts goes back to its place in line, not
//     behind every later arrival.
//  4. Handing over. A running task hands its slot over at its next
//     Checkpoint (a For loop: at its next chunk boundary) when a task of a
//     more urgent class waits, or one of its own class that is due
//     earlier. Without targets, nobody waiting in its own class is due
//     earlier than a running task, so FIFO tasks run to completion.
//  5. Refusing what would be late. A task with a target that must queue is
//     refused at the door when its estimated completion (the work queued
//     ahead of its place, a For loop's on every slot it will hold,
//     divided by the slots (while a fractional slot is paced, by the
//     slots held on average while a task queued: fracPacer.capacity),
//     plus twice the spread of that sum, plus its own expected
//     run time) is past its due; and a queued task with a target is taken
//     out when it reaches the head of its class with less time left than its
//     expected run time. Both return an error wrapping ErrSaturated and
//     ErrDeadline. The expected run time is Target.Service when given,
//     else the class's recent average slot time. A ctx deadline is
//     binding; an objective (WithTarget, ClassOptions.LatencyTarget) has a late
//     budget: about 1 % of the class's queued objective tasks expected
//     late are let through and served late instead (below, "The late
//     budget").
//
// Cost: a FIFO insertion is O(1) (the walk from the tail stops at once);
// a task with a shorter target walks past the waiters it overtakes. A
// Checkpoint compares its due with the head of its class only while that
// class has waiters (one more atomic load). Measured per operation in
// BenchmarkDoSaturated and BenchmarkDoTargets (docs/results.md, "Per-task costs").

// Target is a request's latency target, for WithTarget.
type Target struct {
	// Latency is how long after the WithTarget call the request should
	// be done. 0 or negative: no latency target (Service is still used).
	Latency time.Duration
	// Service is the request's expected run time once it holds a slot
	// (for a For loop: from its first slot to its end, on the slots it
	// gets; while it waits, the queue counts it as that time on each of
	// min(n, the loop's slot bound) slots). 0 means unknown:
	// the class's recent average slot time stands in. Only its size
	// relative to other requests' needs to be right: the executor scales
	// it by the ratio of the slot times recent tasks of the class took to
	// the Service they gave (within 0.25-8x), so a run time measured on
	// one idle core is corrected for what the slots see under load.
	Service time.Duration
}

type targetKey struct{}

type targetVal struct {
	arrival int64 // now() at WithTarget
	Target
}

// WithTarget returns a context that carries t for the tasks submitted with
// it (Do, Go, TryGo, For): they are ordered in their class by the due
// time now + t.Latency, and refused with an error wrapping ErrSaturated
// and ErrDeadline once they can no longer meet it, beyond the class's
// late budget (t is an objective such as a p99 target: about 1 % of the
// class's queued objective tasks are let through late instead; see the
// package documentation's "Latency targets"). Call it when the request
// arrives, so that its target counts from there. The ctx deadline, if
// earlier, still wins, and is binding: no task is let through expected
// past it. It reads the clock once and allocates once.
func WithTarget(ctx context.Context, t Target) context.Context {
	mustCtx(ctx)
	return context.WithValue(ctx, targetKey{}, &targetVal{arrival: now(), Target: t})
}

// ErrDeadline is wrapped, beside ErrSaturated, by the error of a task
// refused because it could no longer meet its latency target (WithTarget,
// its ctx deadline, ClassOptions.LatencyTarget): at the door, when the work
// queued ahead of it and its own expected run time end past its due; or
// at the head of the queue, when less time is left than its expected run
// time (for an objective, once its class's late budget is spent).
// errors.Is(err, ErrDeadline) tells it apart from a full queue.
var ErrDeadline = errors.New("cpuwork: latency target cannot be met")

// targetKind says where a waiter's due comes from.
type targetKind uint8

const (
	targetNone      targetKind = iota // no target: due at arrival (FIFO)
	targetObjective                   // WithTarget or ClassOptions.LatencyTarget, earlier than any ctx deadline: the late budget applies
	targetDeadline                    // the ctx deadline, the earliest: expected late means refused
)

// The late budget. A latency objective (WithTarget, ClassOptions.LatencyTarget)
// is a p99 target, not a promise the caller stops waiting at: below
// capacity a burst makes a few requests late, and answering them late
// beats refusing them (a refused request is one never answered). So a
// queued task whose due comes only from objectives and that is expected
// to miss it (at the door: its estimated completion is past its due; at
// the head of its class: less time is left than its run time) is let through
// while the class's moving share of such late admissions, over its
// queued objective tasks, is under lateBudget (1 %, the p99's share);
// beyond it, it is refused. A task let through at the door is not judged
// again at the head. In overload most arrivals are expected late,
// the budget is spent at once and refusals keep the queue at the
// objective, as without it. A ctx deadline is a promise: a task expected
// to end past its ctx deadline is always refused (at the door; at the
// head, one whose deadline is its earliest due). The share is a moving
// average with weight 1/1024 per queued objective task (each door pass
// counts one, a late pass at the head one more), in 1/2^24: after a
// fresh start or a long on-time stretch about ten late tasks in a row go
// through, then about one in a hundred (11 in a row, then 1.06 % when every
// task is late: docs/raw/late-budget-share-2026-11-24.txt). Its cost: a few integer operations under the lock, on
// the path of a task that queues anyway.
const (
	lateOne    = 1 << 24       // the share's unit: 1 = lateOne
	lateBudget = lateOne / 100 // 1 %
	lateShift  = 10            // a moving average over about the last 1024 samples
)

// lateOKLocked takes one sample of class c's late budget: whether a task
// expected to miss its objective may go on (late true), or an on-time one
// (late false, always true).
func (g *granter) lateOKLocked(c Class, late bool) bool {
	s := &g.lateShare[c]
	ok := !late || g.lateRoomLocked(c)
	x := int32(0)
	if late && ok {
		x = lateOne
		g.cnt[c].late.Add(1)
	}
	*s += (x - *s) >> lateShift
	return ok
}

// lateRoomLocked reports whether class c's late budget has room, without
// taking a sample (Allow reads it so).
func (g *granter) lateRoomLocked(c Class) bool { return g.lateShare[c] < lateBudget }

// dueOf returns the due (in g.now() nanoseconds) of a task of class c
// submitted with ctx that arrived at arrival (0: not known, a task
// admitted on the fast path), where it comes from, and the expected run
// time given with it (0: none).
func (g *granter) dueOf(ctx context.Context, c Class, arrival int64) (due int64, target targetKind, service int64) {
	due = math.MaxInt64
	if tv, ok := ctx.Value(targetKey{}).(*targetVal); ok {
		service = int64(max(tv.Service, 0))
		if tv.Latency > 0 {
			due, target = tv.arrival+int64(tv.Latency), targetObjective
		}
	}
	if lt := g.latencyTarget[c]; lt > 0 && arrival != 0 {
		due, target = min(due, arrival+lt), targetObjective
	}
	if dl, ok := ctx.Deadline(); ok && int64(dl.Sub(epoch)) <= due {
		due, target = int64(dl.Sub(epoch)), targetDeadline
	}
	if target == targetNone {
		// FIFO: due at arrival. A task admitted on the fast path found
		// nobody waiting, so it arrived before every waiter there is.
		due = arrival
		if arrival == 0 {
			due = math.MinInt64
		}
	}
	return due, target, service
}

// setDue computes w's due once, for a task of class c with ctx that
// arrived at arrival (0 if unknown).
func (g *granter) setDue(ctx context.Context, w *waiter, arrival int64) {
	if !w.dueSet {
		w.due, w.target, w.declared = g.dueOf(ctx, w.class, arrival)
		w.work = g.scaledService(w.class, w.declared)
		w.dueSet = true
	}
}

// Bounds of the factor by which a given run time is scaled.
const (
	minServiceScale = 0.25
	maxServiceScale = 8
)

// scaledService is a given run time (Target.Service, ns; 0: none) scaled
// by what the class's slots have really taken for the run times given
// recently: the ratio of the moving averages of their measured slot time
// and of their given run time (a work-weighted ratio, within 0.25-8x).
// A run time measured on one idle core is thus corrected for what the
// slots see under load (a run queue shared with other threads, a For
// loop whose helpers find no free slot, a throttled quota): the door
// needs the tasks' relative sizes from the caller, and measures the
// scale.
func (g *granter) scaledService(c Class, declared int64) int64 {
	if declared <= 0 {
		return declared
	}
	s := g.cnt[c]
	decl, run := s.declAvgNs.Load(), s.runAvgNs.Load()
	if decl <= 0 || run <= 0 {
		return declared
	}
	f := min(max(float64(run)/float64(decl), minServiceScale), maxServiceScale)
	return int64(f * float64(declared))
}

// recordService feeds the slot time d of a task of class c that declared
// a run time and ran in one slot period into the scale of given run times.
func (g *granter) recordService(c Class, declared, d int64) {
	s := g.cnt[c]
	if old := s.declAvgNs.Load(); old == 0 {
		s.declAvgNs.Store(declared)
		s.runAvgNs.Store(d)
		return
	}
	// Racy by design, as avgSlotNs: an estimate.
	decl, run := s.declAvgNs.Load(), s.runAvgNs.Load()
	s.declAvgNs.Store(decl + (declared-decl)>>ewmaShift)
	s.runAvgNs.Store(run + (d-run)>>ewmaShift)
}

// urgentOver reports whether a task of class c due at due should hand its
// slot over: a more urgent class waits, or its own class has a waiter due
// earlier. Lock-free; called at Checkpoints and For chunk boundaries.
func (g *granter) urgentOver(c Class, due int64) bool {
	m := g.waitMask.Load()
	return m&moreUrgent[c] != 0 || (m&(1<<c) != 0 && g.headDue[c].Load() < due)
}

// moreUrgent[c] has the waitMask bits of the classes that c yields to.
var moreUrgent = [NumClasses]uint32{
	Critical:    0,
	Interactive: 1 << Critical,
	Batch:       1<<Critical | 1<<Interactive,
	Background:  1<<Critical | 1<<Interactive | 1<<Batch,
}

// shares is the weighted fair queuing state of Interactive and Batch:
// each class's virtual time is its charged slot time plus the estimate of
// its running tasks, divided by its weight, plus a catch-up offset; a
// freed slot goes to the class that is behind.
type shares struct {
	weight   [NumClasses]float64
	lag      [NumClasses]float64      // catch-up offsets; guarded by the granter's mu
	inflight [NumClasses]atomic.Int64 // expected slot time of granted tasks still running, ns (every class)
	lastSlot [NumClasses]atomic.Int64 // last exactly measured slot time, ns: the estimate of a grant
}

// vtime is class c's virtual time in weighted nanoseconds.
func (g *granter) vtime(c Class) float64 {
	return float64(g.cnt[c].used.Load()+g.share.inflight[c].Load())/g.share.weight[c] + g.share.lag[c]
}

// enqueueLocked puts w in its class queue at its due's place.
func (g *granter) enqueueLocked(w *waiter) {
	c := w.class
	q := &g.queues[c]
	if q.n == 0 && (c == Interactive || c == Batch) {
		// A class that starts waiting gets no credit for the time it was
		// idle: its virtual time is raised to the other's if it is behind.
		other := Interactive
		if c == Interactive {
			other = Batch
		}
		if g.queues[other].n > 0 {
			if d := g.vtime(other) - g.vtime(c); d > 0 {
				g.share.lag[c] += d
			}
		}
	}
	if w.work <= 0 {
		w.work = g.cnt[c].avgSlotNs.Load()
	}
	after, _, _ := q.place(w.due)
	q.insertAfter(after, w)
	g.queuedLocked(c)
	g.waiting.Add(1)
	g.waitMask.Or(1 << c)
}

// queuedLocked publishes class c's head due for lock-free readers.
func (g *granter) queuedLocked(c Class) { g.headDue[c].Store(g.queues[c].headDue()) }

func (g *granter) dequeuedLocked(c Class) {
	g.waiting.Add(-1)
	g.queuedLocked(c)
	if g.queues[c].n == 0 {
		g.waitMask.And(^uint32(1 << c))
	}
}

// removeLocked takes a queued waiter out of its queue (cancellation).
func (g *granter) removeLocked(w *waiter) {
	g.queues[w.class].remove(w)
	g.dequeuedLocked(w.class)
}

// pickLocked removes and returns the waiter that gets the next slot:
// Critical first; then Interactive or Batch, whichever has the smaller
// virtual time; Background last; inside the class, the head (earliest
// due). A head that can no longer meet its target is refused on the way
// (refuseLocked) and the next one considered. nil when nobody may take
// the slot.
func (g *granter) pickLocked() *waiter {
	for {
		c, ok := g.classLocked()
		if !ok {
			return nil
		}
		w := g.queues[c].popFront()
		g.dequeuedLocked(c)
		switch {
		case c == Background:
			g.sinceBackground = 0
		case g.queues[Background].n > 0:
			g.sinceBackground++
		}
		t := g.now()
		if g.lateLocked(w, t) {
			g.refuseLocked(w)
			continue
		}
		if g.backlogLocked(w, t) {
			g.shedBacklogLocked(w, t)
			continue
		}
		return w
	}
}

// classLocked is the class whose head gets the next slot.
func (g *granter) classLocked() (Class, bool) {
	lc := g.lowCap.Load()
	low := lc == 0 || g.lowRunning.Load() < lc // Batch/Background may take a slot
	batch := low && g.queues[Batch].n > 0
	bgDue := low && g.queues[Background].n > 0 &&
		(g.sinceBackground >= backgroundEvery || g.now()-g.queues[Background].head.enq >= int64(backgroundMaxWait))
	switch {
	case g.queues[Critical].n > 0:
		return Critical, true
	case bgDue:
		return Background, true
	case g.queues[Interactive].n > 0 && batch:
		if g.vtime(Batch) < g.vtime(Interactive) {
			return Batch, true
		}
		return Interactive, true
	case g.queues[Interactive].n > 0:
		return Interactive, true
	case batch:
		return Batch, true
	case low && g.queues[Background].n > 0:
		return Background, true
	}
	return 0, false
}

// serviceOf is the expected run time of w: given with its target or set
// at its first enqueue (w.work), else its class's recent average slot
// time (0 when nothing was measured yet).
func (g *granter) serviceOf(w *waiter) int64 {
	if w.work > 0 {
		return w.work
	}
	return g.cnt[w.class].avgSlotNs.Load()
}

// lateLocked reports whether w, at the head of its class at time t, is
// to be refused: less time is left than its expected run time (it would
// end past its due), and its due is its ctx deadline or its class's late
// budget is spent. Only submissions that have a target and never ran are
// refused. (Letting every objective task with time left run, since it has
// waited already, made the service scenario shed more, not less: a late
// large request delays every small one behind it:
// docs/raw/late-budget-ab-2026-11-24.txt.)
func (g *granter) lateLocked(w *waiter, t int64) bool {
	if w.target == targetNone || w.started || w.requeued || w.kind == waitHelper || t+g.serviceOf(w) <= w.due {
		return false
	}
	return w.target == targetDeadline || !g.lateOKLocked(w.class, true)
}

// refuseLocked takes w, just out of the queue, out for good with an error
// wrapping ErrSaturated and ErrDeadline: a blocked caller is woken
// without a slot, a task fails after the lock is released (unlockAndWake).
func (g *granter) refuseLocked(w *waiter) {
	left := time.Duration(w.due - g.now())
	g.refuseWithLocked(w, &shedError{class: w.class, deadline: true, reason: fmt.Sprintf(
		"its latency target can no longer be met: %v left, expected run time %v", left.Round(time.Microsecond),
		time.Duration(g.serviceOf(w)).Round(time.Microsecond))})
}

// refuseWithLocked takes w, just out of the queue, out for good with err
// (counted as rejected and shed).
func (g *granter) refuseWithLocked(w *waiter, err *shedError) {
	s := g.cnt[w.class]
	s.rejected.Add(1)
	s.shed.Add(1)
	w.refused = err
	g.pending = append(g.pending, w)
}

// doorSpread is how many times its spread the door adds to its estimate
// of the queue wait (doorLocked): the queue ahead of an arrival is the
// sum of n run times whose mean the class's average slot time estimates;
// the sum's spread grows as sqrt(n) x the run times' own (their mean
// absolute miss of what was expected of them, devSlotNs), and an arrival
// admitted where the mean alone just fits is late about half the time.
// Where the run times are known (Target.Service) or alike, the spread and
// the margin are near 0.
const doorSpread = 2

// meanWaitLocked is the door's mean estimate of the queue wait of w,
// arriving at t, ns: the expected run time of the work queued ahead of
// its place (in its own class up to its due, and in every more urgent
// class) plus half of the running tasks' expected run time, divided by
// the slots (while the queue stands, for an arrival without a given run
// time, standingWait: shed.go); and the number of tasks queued ahead of
// it.
func (g *granter) meanWaitLocked(w *waiter, t int64) (wait int64, ahead int) {
	_, ahead, work := g.queues[w.class].place(w.due)
	for k := Critical; k < w.class; k++ {
		ahead += g.queues[k].n
		work += g.queues[k].work
	}
	if x, ok := g.standingWait(w, t, ahead); ok {
		return x, ahead
	}
	var running int64
	for k := range g.share.inflight {
		running += g.share.inflight[k].Load()
	}
	return int64(float64(work+running/2) / g.serviceSlots()), ahead
}

// doorLocked is the door's target check for w, a task not yet queued
// whose due is set: the refusal, or nil. Its estimated completion is now
// plus the queue wait (the expected run time of the work queued ahead of
// its place, in its own class up to its due and in every more urgent
// class, plus half of the running tasks' expected run time, divided by
// the slots) plus its own expected run time.
//
// A task whose due comes only from objectives takes one sample of its
// class's late budget here, and one expected late is let in while the
// budget lasts.
func (g *granter) doorLocked(ctx context.Context, w *waiter, t int64, peek bool) error {
	if w.target == targetNone || g.slots <= 0 {
		return nil
	}
	wait, ahead := g.meanWaitLocked(w, t)
	slots := g.serviceSlots()
	if dev := g.cnt[w.class].devSlotNs.Load(); dev > 0 {
		// The spread of the estimate: n run times that each miss their
		// expectation by dev on average sum to within ~sqrt(n) x dev of
		// theirs, and a queue estimated at its mean is late half the
		// time for the arrival at its edge.
		wait += int64(doorSpread * float64(dev) * math.Sqrt(float64(ahead+1)) / slots)
	}
	end := t + wait + g.serviceOf(w)
	late := end > w.due
	if w.target == targetObjective {
		if dl, ok := ctx.Deadline(); ok && end > int64(dl.Sub(epoch)) {
			late = true // past its ctx deadline too: no budget for that
		} else if peek {
			if !late || g.lateRoomLocked(w.class) {
				return nil // Allow: the budget read, not sampled
			}
		} else if g.lateOKLocked(w.class, late) {
			if late {
				w.target = targetNone // let through late once: not judged again at the head (its due still orders it)
			}
			return nil
		}
	}
	if !late {
		return nil
	}
	return &shedError{class: w.class, deadline: true, reason: fmt.Sprintf(
		"its latency target is in %v but the estimated queue wait is %v (%d tasks ahead) and its expected run time %v",
		time.Duration(w.due-t).Round(time.Microsecond), time.Duration(wait).Round(time.Microsecond), ahead,
		time.Duration(g.serviceOf(w)).Round(time.Microsecond))}
}

// waiterKind says how a granted waiter is woken and what it counts as.
type waiterKind uint8

const (
	// waitCaller is a blocked Do caller, or a task waiting at a
	// Checkpoint for its slot back: ready is signalled.
	waitCaller waiterKind = iota
	// waitTask is an asynchronous task (Go): it is sent to a worker.
	waitTask
	// waitHelper is a For loop's helper waiting for a slot to run more
	// chunks of its loop (ready is signalled). Not a submission: it is
	// never counted in Stats, never refused and never shed.
	waitHelper
)

// waiter is a queued claim on a slot.
type waiter struct {
	prev, next *waiter
	ready      chan struct{}
	task       *Task
	// refused is set when the waiter was taken out of the queue because
	// its latency target could no longer be met (order.go): it is woken
	// without a slot and returns this error.
	refused *shedError
	enq     int64 // g.now() when queued
	est     int64 // slot time charged to inflight at grant
	// work is the expected run time, ns: the one given with its target
	// (Target.Service) from setDue, scaled by what the slots have taken
	// for given run times (scaledService), else its class's average slot
	// time at its first enqueue; counted in its queue's work while queued.
	work int64
	// declared is the run time given with its target (Target.Service),
	// ns, unscaled; 0: none.
	declared int64
	// span is how many slots the task runs on at once when it is a For
	// loop's caller (its helpers' slots, up to the loop's bound), for
	// the queue's slot time (slotWork); 0 or 1: one.
	span int32
	// due orders the waiters of a class: arrival + latency target, the
	// arrival itself without a target (FIFO), see order.go. dueSet says
	// it has been computed (a task admitted on the fast path computes it
	// only when a Checkpoint needs it).
	due     int64
	class   Class
	kind    waiterKind
	queued  bool
	granted bool
	// target says where due comes from: none (FIFO), an objective
	// (WithTarget or ClassOptions.LatencyTarget: a waiter expected to miss it
	// is refused beyond the class's late budget) or a ctx deadline (one
	// expected to miss its due is always refused); order.go.
	target   targetKind
	dueSet   bool
	requeued bool // a running task that yielded at a Checkpoint
	// started is set, under the executor's lock, when w is first granted
	// a slot: from then on w belongs to its running task, and only that
	// task (at a Checkpoint) may queue or dequeue it. See cancelableLocked.
	started bool
}

// cancelableLocked reports whether a cancellation from outside the task
// (its context's AfterFunc, or Close failing the queue) may remove w: only
// while w is queued and has never held a slot. A task re-queued at a
// Checkpoint is in the queue again, but its fn is running: its own
// Checkpoint handles its context's end.
func (w *waiter) cancelableLocked() bool { return w.queued && !w.started }

// waitQueue is one class's waiters in due order (ties in arrival order):
// a doubly linked list, so that a cancelled waiter leaves in O(1).
type waitQueue struct {
	head, tail *waiter
	n          int
	work       int64 // the queued waiters' expected run time, ns
}

// place returns the waiter after which a waiter due at due goes (nil: at
// the head), how many waiters are ahead of it and their expected run
// time. It walks from the tail past the waiters due later, so FIFO (every
// due is an arrival time) costs O(1) and a waiter with a shorter target
// passes only the waiters it overtakes.
func (q *waitQueue) place(due int64) (after *waiter, ahead int, work int64) {
	after, ahead, work = q.tail, q.n, q.work
	for after != nil && after.due > due {
		after, ahead, work = after.prev, ahead-1, work-after.slotWork()
	}
	return after, ahead, work
}

// insertAfter links w after p (nil: at the head).
func (q *waitQueue) insertAfter(p, w *waiter) {
	w.prev, w.queued = p, true
	if p == nil {
		w.next, q.head = q.head, w
	} else {
		w.next, p.next = p.next, w
	}
	if w.next != nil {
		w.next.prev = w
	} else {
		q.tail = w
	}
	q.n++
	q.work += w.slotWork()
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
	q.work -= w.slotWork()
}

// slotWork is the slot time w's task is expected to take: its expected
// run time on each of the span slots it runs on at once (a For loop's
// caller and helpers). It must not change while w is queued.
func (w *waiter) slotWork() int64 {
	if w.span > 1 {
		return w.work * int64(w.span)
	}
	return w.work
}

func (q *waitQueue) popFront() *waiter {
	w := q.head
	if w != nil {
		q.remove(w)
	}
	return w
}

// headDue is the due of the first waiter, math.MaxInt64 when empty.
func (q *waitQueue) headDue() int64 {
	if q.head == nil {
		return math.MaxInt64
	}
	return q.head.due
}

// epoch anchors now(); time.Since on a monotonic reading costs one clock
// read (~25 ns here), half of time.Now.
var epoch = time.Now()

func now() int64 { return int64(time.Since(epoch)) }
