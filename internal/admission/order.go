package admission

import (
	"context"
	"math"
	"sync/atomic"
)

// Which waiting task gets the next slot (the queue policy):
//
//  1. Class. Critical first; then Interactive or Batch by weighted fair
//     queuing on measured slot time (shares below); Background last, with
//     a starvation guard (door.go).
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
//     slots held on average while a task queued: pacer.Pacer.Capacity),
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
// BenchmarkDoSaturated and BenchmarkDoTargets (docs/performance.md).

// targetKind says where a Waiter's due comes from.
type targetKind uint8

const (
	targetNone      targetKind = iota // no target: due at arrival (FIFO)
	targetObjective                   // WithTarget or ClassOptions.LatencyTarget, earlier than any ctx deadline: the late budget applies
	targetDeadline                    // the ctx deadline, the earliest: expected late means refused
)

// dueOf returns the due (in g.now() nanoseconds) of a task of class c
// submitted with ctx that arrived at arrival (0: not known, a task
// admitted on the fast path), where it comes from, the expected run
// time given with it (0: none), and its ctx deadline when that is later
// than an objective due (hard; 0: none).
func (g *Granter) dueOf(ctx context.Context, c Class, arrival int64) (due int64, target targetKind, service, hard int64) {
	due = math.MaxInt64
	var objective int64 // the latency the due allows from arrival
	if tv, ok := ctx.Value(targetKey{}).(*targetVal); ok {
		service = tv.service
		if tv.latency > 0 {
			due, target, objective = tv.arrival+tv.latency, targetObjective, tv.latency
		}
	}
	if lt := g.latencyTarget[c]; lt > 0 && arrival != 0 && arrival+lt < due {
		due, target, objective = arrival+lt, targetObjective, lt
	}
	if dl, ok := ctx.Deadline(); ok && int64(dl.Sub(epoch)) <= due {
		due, target = int64(dl.Sub(epoch)), targetDeadline
		if arrival != 0 {
			objective = due - arrival
		}
	} else if ok && target == targetObjective {
		hard = int64(dl.Sub(epoch))
	}
	if objective > 0 {
		g.noteObjective(objective)
	}
	if target == targetNone {
		// FIFO: due at arrival. A task admitted on the fast path found
		// nobody waiting, so it arrived before every Waiter there is.
		due = arrival
		if arrival == 0 {
			due = math.MinInt64
		}
	}
	return due, target, service, hard
}

// noteObjective folds the latency a queued task's due allows (ns) into
// the current window's tightest (Objective).
func (g *Granter) noteObjective(d int64) {
	m := &g.objective[g.objectiveWin.Load()&1]
	for {
		cur := m.Load()
		if cur != 0 && cur <= d || m.CompareAndSwap(cur, d) {
			return
		}
	}
}

// Rank is w's place in its class's queue (its due, plus its key's lead
// past its share), computed once from ctx and w's arrival the first
// time it is needed: a Checkpoint's hand-over question.
func (g *Granter) Rank(ctx context.Context, w *Waiter) int64 {
	if !w.dueSet {
		g.setDue(ctx, w, w.enq)
	}
	return w.rank
}

// setDue computes w's due once, for a task of class c with ctx that
// arrived at arrival (0 if unknown).
func (g *Granter) setDue(ctx context.Context, w *Waiter, arrival int64) {
	if !w.dueSet {
		w.due, w.target, w.declared, w.hard = g.dueOf(ctx, w.class, arrival)
		w.rank = w.due
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
func (g *Granter) scaledService(c Class, declared int64) int64 {
	if declared <= 0 {
		return declared
	}
	s := g.cnt[c]
	decl, run := s.DeclAvgNs.Load(), s.RunAvgNs.Load()
	if decl <= 0 || run <= 0 {
		return declared
	}
	f := min(max(float64(run)/float64(decl), minServiceScale), maxServiceScale)
	return int64(f * float64(declared))
}

// recordService feeds the slot time d of a task of class c that declared
// a run time and ran in one slot period into the scale of given run times.
func (g *Granter) recordService(c Class, declared, d int64) {
	s := g.cnt[c]
	if old := s.DeclAvgNs.Load(); old == 0 {
		s.DeclAvgNs.Store(declared)
		s.RunAvgNs.Store(d)
		return
	}
	// Racy by design, as avgSlotNs: an estimate.
	decl, run := s.DeclAvgNs.Load(), s.RunAvgNs.Load()
	s.DeclAvgNs.Store(decl + (declared-decl)>>ewmaShift)
	s.RunAvgNs.Store(run + (d-run)>>ewmaShift)
}

// Behind reports whether a running task (or For helper) of class c
// ranked at rank (its Rank) should hand its slot over: a more urgent
// class waits, or its own class has a Waiter ranked ahead of it.
// Lock-free and inlined; called at Checkpoints and For chunk boundaries
// once Waiting says someone waits.
func (g *Granter) Behind(c Class, rank int64) bool {
	c &= NumClasses - 1 // no bounds checks
	m := g.waitMask.Load()
	return m&g.urgent[c] != 0 || (m&(1<<c) != 0 && g.headDue[c].Load() < rank)
}

// sameSide reports whether classes a and b draw on the same slots: always,
// unless batch has slots of its own (Config.Beside).
func (g *Granter) sameSide(a, b Class) bool { return !g.beside || a.RunsOnWorker() == b.RunsOnWorker() }

// MoreUrgent[c] has the waitMask bits of the classes that c yields to.
var MoreUrgent = [NumClasses]uint32{
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
	lag      [NumClasses]float64      // catch-up offsets; guarded by the Granter's mu
	inflight [NumClasses]atomic.Int64 // expected slot time of granted tasks still running, ns (every class)
	lastSlot [NumClasses]atomic.Int64 // last exactly measured slot time, ns: the estimate of a grant
}

// vtime is class c's virtual time in weighted nanoseconds.
func (g *Granter) vtime(c Class) float64 {
	return float64(g.cnt[c].Used.Load()+g.share.inflight[c].Load())/g.share.weight[c] + g.share.lag[c]
}

// enqueueLocked puts w in its class queue at its due's place.
func (g *Granter) enqueueLocked(w *Waiter) {
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
		w.work = g.cnt[c].AvgSlotNs.Load()
	}
	after, _, _ := q.place(w.rank)
	q.insertAfter(after, w)
	if after == nil { // a new head
		g.queuedLocked(c)
	}
	if q.n == 1 {
		g.waitMask.Or(1 << c)
	}
	if w.clocked() {
		g.clocked.Add(1)
	}
}

// clocked reports whether picking w reads the time: it has a latency
// target, or it is Background's (the starvation guard).
func (w *Waiter) clocked() bool { return w.target != targetNone || w.class == Background }

// clockFor is the time for a dispatch about to take mu: read now when a
// decision under mu may need it (clocked, shedOn), else 0.
func (g *Granter) clockFor() int64 {
	if g.clocked.Load() != 0 || g.shedOn.Load() != 0 {
		return g.now()
	}
	return 0
}

// queuedLocked publishes class c's head due for lock-free readers.
func (g *Granter) queuedLocked(c Class) { g.headDue[c].Store(g.queues[c].headDue()) }

// dequeuedLocked follows the removal of one of class c's waiters; head
// says it was the head. The shared words are written only when they
// change: every submitter reads them.
func (g *Granter) dequeuedLocked(w *Waiter, head bool) {
	c := w.class
	if w.clocked() {
		g.clocked.Add(-1)
	}
	if head {
		g.queuedLocked(c)
	}
	if g.queues[c].n == 0 {
		g.waitMask.And(^uint32(1 << c))
	}
}

// removeLocked takes a queued Waiter out of its queue (cancellation).
func (g *Granter) removeLocked(w *Waiter) {
	head := w.prev == nil
	g.queues[w.class].remove(w)
	g.dequeuedLocked(w, head)
}

// pickLocked removes and returns the Waiter that gets the next slot:
// Critical first; then Interactive or Batch, whichever has the smaller
// virtual time; Background last; inside the class, the head (earliest
// due). A head that can no longer meet its target is refused on the way
// (refuseLocked) and the next one considered. nil when nobody may take
// the slot. t is the time, read before the lock (0: read when needed:
// only a head with a target, a backlog test or a waiting Background
// class reads it).
func (g *Granter) pickLocked(t *int64) *Waiter {
	for {
		c, ok := g.classLocked(t)
		if !ok {
			return nil
		}
		w := g.queues[c].popFront()
		g.dequeuedLocked(w, true)
		switch {
		case c == Background:
			g.sinceBackground = 0
		case g.queues[Background].n > 0:
			g.sinceBackground++
		}
		if w.target != targetNone && g.lateLocked(w, g.at(t)) {
			g.refuseLocked(w, *t)
			continue
		}
		if (g.shed[w.class].severe || g.spentLocked(w.class)) && g.backlogLocked(w, g.at(t)) {
			g.shedBacklogLocked(w, *t)
			continue
		}
		return w
	}
}

// at is *t, read from the clock first if it is 0.
func (g *Granter) at(t *int64) int64 {
	if *t == 0 {
		*t = g.now()
	}
	return *t
}

// classLocked is the class whose head gets the next slot.
func (g *Granter) classLocked(t *int64) (Class, bool) {
	lc, hc := g.lowCap.Load(), g.highCap.Load()
	low := lc == 0 || g.lowRunning.Load() < lc // Batch/Background may take a slot
	high := hc == 0 || g.highRunning.Load() < hc
	batch := low && g.queues[Batch].n > 0
	bgDue := low && g.queues[Background].n > 0 &&
		(g.sinceBackground >= BackgroundEvery || g.at(t)-g.queues[Background].head.enq >= int64(BackgroundMaxWait))
	switch {
	case high && g.queues[Critical].n > 0:
		return Critical, true
	case bgDue:
		return Background, true
	case high && g.queues[Interactive].n > 0 && batch && !g.beside:
		if g.vtime(Batch) < g.vtime(Interactive) {
			return Batch, true
		}
		return Interactive, true
	case high && g.queues[Interactive].n > 0:
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
func (g *Granter) serviceOf(w *Waiter) int64 {
	if w.work > 0 {
		return w.work
	}
	return g.cnt[w.class].AvgSlotNs.Load()
}

// medShift: the median estimate moves 1/2^medShift of itself per slot
// time, so it follows a change of sizes within a few dozen tasks and
// sits within about that share of the median.
const medShift = 4

// ownRun is the run time the door and the head judge w's own end by:
// its given run time (scaled); else, when nobody of its class is queued
// to be displaced by it (alone), its class's median slot time; else its
// class's average. With nobody to displace, a request that ends late
// costs only its own slot time, and whether it ends in time is an even
// bet at the median: the average of unlike run times sits above most of
// them (with a tenth of the requests ten times the rest, at twice the
// median), refused requests nine in ten of which would have made it, and
// a class refused whole never measured a run time to correct it. With a
// queue, a late request delays the ones behind it, and the average,
// which prices that, stays.
func (g *Granter) ownRun(w *Waiter, alone bool) int64 {
	if w.declared != 0 || !alone {
		return g.serviceOf(w)
	}
	if med := g.cnt[w.class].MedSlotNs.Load(); med > 0 {
		return med
	}
	return g.cnt[w.class].AvgSlotNs.Load()
}

// waitQueue is one class's waiters in due order (ties in arrival order):
// a doubly linked list, so that a cancelled Waiter leaves in O(1).
type waitQueue struct {
	head, tail *Waiter
	n          int
	work       int64 // the queued waiters' expected run time, ns
}

// place returns the Waiter after which a Waiter due at due goes (nil: at
// the head), how many waiters are ahead of it and their expected run
// time. It walks from the tail past the waiters due later, so FIFO (every
// due is an arrival time) costs O(1) and a Waiter with a shorter target
// passes only the waiters it overtakes.
func (q *waitQueue) place(due int64) (after *Waiter, ahead int, work int64) {
	after, ahead, work = q.tail, q.n, q.work
	for after != nil && after.rank > due {
		after, ahead, work = after.prev, ahead-1, work-after.slotWork()
	}
	return after, ahead, work
}

// insertAfter links w after p (nil: at the head).
func (q *waitQueue) insertAfter(p, w *Waiter) {
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

func (q *waitQueue) remove(w *Waiter) {
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
func (w *Waiter) slotWork() int64 {
	if w.span > 1 {
		return w.work * int64(w.span)
	}
	return w.work
}

func (q *waitQueue) popFront() *Waiter {
	w := q.head
	if w != nil {
		q.remove(w)
	}
	return w
}

// headDue is the due of the first Waiter, math.MaxInt64 when empty.
func (q *waitQueue) headDue() int64 {
	if q.head == nil {
		return math.MaxInt64
	}
	return q.head.rank
}
