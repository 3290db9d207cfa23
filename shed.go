package cpuwork

import (
	"context"
	"fmt"
	"math"
	"time"
)

// Load shedding at the door. A task that would queue is refused at once,
// with an error wrapping ErrSaturated, when:
//
//   - its class queue is full (ClassOptions.QueueLimit);
//   - it has a latency target (WithTarget, its ctx deadline,
//     ClassOptions.LatencyTarget) that it cannot meet: the tasks queued ahead
//     of its place (in its own class up to its due, and in more urgent
//     classes) times the class's recent slot time (an exponentially
//     weighted moving average, 1/8 per measured task), divided by the
//     slots (while a fractional slot is paced, the slots held on average
//     while a task queued: fracPacer.capacity), plus twice that sum's spread (sqrt of the tasks ahead times
//     how far slot times recently fell from what was expected of them:
//     doorSpread, order.go), plus its own expected run time, end past its
//     due (while its class's queue stands and its run time was not given,
//     the queue wait is the tasks ahead, plus half the slots, times the
//     class's slot time per completion of its standing intervals, over
//     the slots: standingWait), and it
//     has a ctx deadline or its class's late budget is spent (order.go;
//     the error also wraps ErrDeadline);
//   - its class has a queue-wait target (ClassOptions.MaxQueueWait; without
//     one, for an arrival with a latency target, two of the class's slot
//     times, within a tenth and a half of that target: autoQueueTarget)
//     and is shedding: CoDel's test (Nichols and Jacobson,
//     "Controlling Queue Delay", ACM Queue 2012), applied at the door
//     instead of at the head: when the smallest queue wait of the tasks
//     granted a slot during an interval (100 ms, or 2 of the class's slot
//     times if longer) stayed above the target while the interval's
//     arrivals (admitted or refused, at their expected run time) brought
//     more work than the slots could do in it — or, when some of them came
//     without a given run time (Target.Service), more of them arrived than
//     the class completed in it — and the arrivals also outran the slots
//     over the recent intervals together (shedOnsetHorizon), the queue is
//     standing and the arrivals outrun the slots, and the class sheds:
//     new arrivals whose mean estimated queue wait (the door's estimate
//     above without its spread) is above the target (without MaxQueueWait, above twice it:
//     standingPeak) are refused, so the queue is held near the
//     target instead of near the latency target, until intervals in
//     which it refused nobody or whose arrivals did not outrun the slots
//     follow one another for shedCalmArrivals arrivals or shedCalmTime.
//     An arrival that finds its class queue empty is never shed.
//
// While a class sheds and its last interval's arrivals outran the slots
// more than twice (backlogOutrun), a task reaching the head of its queue
// that has already waited more than twice the target (backlogWaits) is
// refused there too, with the same kind of error, unless it is the last
// task of its class queued: the backlog the door let in before the test
// could see the queue stand (backlogLocked).
//
// Everything here runs under the executor's lock, on the path of a task
// that queues anyway; the admission fast path never pays for it.

const (
	codelInterval = 100 * time.Millisecond
	ewmaShift     = 3 // slot-time average: new = old + (sample-old)/8
)

// standingShare: a class without a queue-wait target (ClassOptions.MaxQueueWait)
// whose arrivals carry a latency target sheds those arrivals while its
// queue stands above 1/standingShare of that target (CoDel's test, as
// below). Admitting up to the target itself, as the door's estimate alone
// does, serves a standing queue at the target: the requests at its edge
// end late whenever their run times come out above the class's average,
// and the longer queue serves nothing more, since the slots are busy
// either way. A tenth kept every served request within a 0.59 s objective
// at twice an image server's capacity (docs/results.md).
const standingShare = 10

// serviceQueue is the queue-wait target of a class without
// ClassOptions.MaxQueueWait, in slot times of the class: the wait of a
// bounded queue twice the slots deep, as servers size theirs (imgproxy's
// 2x GOMAXPROCS). With standingPeak, the queue peaks at twice that.
const serviceQueue = 2

// autoQueueTarget is the queue-wait target of a class without
// ClassOptions.MaxQueueWait for an arrival with left ns to its due, its
// class's slot time being slot ns (0: not measured yet): serviceQueue
// slot times — what a short bounded queue holds — but never under
// 1/standingShare of the time left, and at most half of it. The floor
// keeps a class whose sizes differ widely from shedding below capacity:
// two mean slot times of a mix of 60 µs and 28 ms requests are shorter
// than one large request, and a queue that stands that long comes and
// goes at 80 % of capacity (docs/results.md, the default run).
func autoQueueTarget(left, slot int64) int64 {
	return min(max(serviceQueue*slot, left/standingShare), left/2)
}

// standingPeak: while such a class sheds, it refuses an arrival whose
// mean estimated queue wait is above standingPeak times its target, not
// above the target itself. The test that starts the shedding still asks
// whether the smallest wait of an interval stood above the target; the
// refusals hold the queue's peak at twice it, so that its trough stays
// near the target, as CoDel's test holds it, instead of empty (why, and
// what it measured: docs/results.md, "imageproxy, a
// server nobody here wrote"). A class with ClassOptions.MaxQueueWait is held at
// that target, as set.
const standingPeak = 2

// shedState is one class's queue-wait controller. Guarded by the granter's mu.
type shedState struct {
	// auto: target is 1/standingShare of the latest latency target of
	// the class's arrivals (no ClassOptions.MaxQueueWait), and only arrivals
	// with a target are shed.
	auto          bool
	target        int64 // ns; 0: off
	intervalStart int64 // now() when the current interval began
	minWait       int64 // smallest queue wait granted in the interval, ns
	// admittedAt is the class's Admitted count when the interval began,
	// grants the queued submissions granted in it: more admissions than
	// queued grants means some took a free slot at once (wait 0) on the
	// lock-free path, which never feeds minWait itself.
	admittedAt uint64
	grants     uint64
	// refused counts the arrivals the test refused in the interval,
	// offered the expected run time of the interval's arrivals, ns
	// (admitted or refused; those that took a free slot at once are added
	// at the interval's end, at the class's average): a shedding class
	// stops once the arrivals no longer outrun the slots.
	refused uint64
	offered int64
	// arrivals counts the interval's arrivals (admitted or refused),
	// completedAt is the class's Completed count when it began, guessed
	// is set when one of its arrivals had no given run time
	// (Target.Service): its offered work is then partly a guess.
	arrivals    uint64
	completedAt uint64
	guessed     bool
	shedding    bool
	// sustained: the arrivals also outran the slots over the recent
	// intervals together (sums decayed with shedOnsetHorizon, of the
	// offered work and what the slots could do, and of the arrivals and
	// completions): the onset test's second condition.
	sumOffered, sumCapacity, sumArrivals, sumDone float64
	// severe: the class sheds and the last interval's arrivals outran the
	// slots more than backlogOutrun times (backlogLocked).
	severe bool
	// calmArrivals, calmFor: the arrivals and time of the calm intervals
	// in a row (refused nobody, or the arrivals did not outrun the
	// slots) of a shedding class.
	calmArrivals uint64
	calmFor      int64
	// perDone is the class's slot time per completion over the intervals
	// whose queue stood above the target (ns; a 1/4 moving average over
	// such intervals, 0 before one), taken at perDoneAt: the slot time
	// the class held in the interval (what the slots could do, less what
	// the other classes were charged) over its completions. It counts the
	// tasks still running, which the average of completed slot times
	// (avgSlotNs) cannot: a server that has just started learns that
	// average from its short requests first (standingWait). usedAt is
	// each class's charged slot time when the interval began.
	perDone   int64
	perDoneAt int64
	usedAt    [NumClasses]int64
}

// shedCalmArrivals, shedCalmTime: a shedding class stops once its calm
// intervals in a row held shedCalmArrivals arrivals or lasted
// shedCalmTime. One interval of a few arrivals is calm by chance in
// overload: at 1.4x its capacity, an image server's interval of 7
// arrivals refused nobody one time in five. With 20 arrivals a class
// whose arrivals hold a few milliseconds of work stops after one
// interval, as before, and one whose requests take tens of milliseconds
// after two or three.
const (
	shedCalmArrivals = 20
	shedCalmTime     = time.Second
)

// shedOnsetHorizon, sustainedCount: a class starts shedding only when
// its arrivals outran the slots in the interval and also over the recent
// intervals together, weighted by exp(-age/shedOnsetHorizon): their work
// above what the slots could do, or, when some came without a given run
// time, sustainedCount times as many arrivals as completions. One
// interval of 100 ms outruns the slots by chance at 80 % of capacity —
// in more arrivals than completions about half the time, in work a third
// — so the interval alone started shedding below capacity whenever a
// queue happened to stand for it; over the last half second or so the
// 80 % load is seen as 80 %, while twice the capacity passes both tests
// within two intervals, even after a long run at 80 %.
const (
	shedOnsetHorizon = 500 * time.Millisecond
	sustainedCount   = 1.25
)

// shedError is a refusal that says why, with the numbers it was decided
// on; it wraps ErrSaturated, and ErrDeadline when a latency target could
// not be met.
type shedError struct {
	class    Class
	deadline bool
	reason   string
}

func (e *shedError) Error() string {
	return fmt.Sprintf("cpuwork: %s task shed: %s", e.class, e.reason)
}

func (e *shedError) Unwrap() []error {
	if e.deadline {
		return []error{ErrSaturated, ErrDeadline}
	}
	return []error{ErrSaturated}
}

// queueAdmitLocked decides whether w, a task of class w.class whose due is
// set, may join its queue: nil, or the error that refuses it (ErrClosed,
// ctx's error, or one wrapping ErrSaturated: a full queue, a standing
// queue above the class's queue-wait target, a latency target it cannot
// meet, the last also wrapping ErrDeadline). It counts the refusal. The one
// door every queued submission (Do, Go, and Checkpoint's re-queue is not a
// submission) goes through, and Allow's (peek: a done ctx is not counted
// and the late budget is read, not sampled).
func (g *granter) queueAdmitLocked(ctx context.Context, w *waiter, peek bool) error {
	c := w.class
	s := g.cnt[c]
	switch {
	case g.closed.Load():
		s.rejected.Add(1)
		return ErrClosed
	case ctx.Err() != nil:
		if !peek {
			s.canceled.Add(1)
		}
		return ctx.Err()
	case g.queues[c].n >= g.limit[c]:
		s.rejected.Add(1)
		return ErrSaturated
	}
	t := g.now()
	st := &g.shed[c]
	if !peek {
		st.offer(g, w) // Allow's call counts when it refuses: an allowed one is submitted next
	}
	if (st.target == 0 || st.auto) && w.target != targetNone && w.due > t {
		st.target, st.auto = autoQueueTarget(w.due-t, g.cnt[c].avgSlotNs.Load()), true
	}
	if st.target > 0 && g.queues[c].n > 0 && (!st.auto || w.target != targetNone) {
		g.codelTickLocked(c, t)
		var wait int64 // the arrival's mean estimated queue wait, read only while shedding
		if st.shedding {
			wait, _ = g.meanWaitLocked(w, t)
		}
		limit := st.target
		if st.auto {
			limit *= standingPeak
		}
		if st.shedding && wait > limit {
			st.refused++
			if peek {
				st.offer(g, w)
			}
			s.rejected.Add(1)
			s.shed.Add(1)
			why := "ClassOptions.MaxQueueWait"
			if st.auto {
				why = fmt.Sprintf("%d slot times of the class, within 1/%d and 1/2 of the latency target; refused above %d times it", serviceQueue, standingShare, standingPeak)
			}
			return &shedError{class: c, reason: fmt.Sprintf("its queue has stood above the queue-wait target %v for an interval (%s) and its estimated wait is %v", time.Duration(st.target), why, time.Duration(wait).Round(time.Microsecond))}
		}
	}
	if err := g.doorLocked(ctx, w, t, peek); err != nil {
		if peek {
			st.offer(g, w)
		}
		s.rejected.Add(1)
		s.shed.Add(1)
		return err
	}
	return nil
}

// Allow is the door's verdict on a task of class c submitted now with
// ctx, without submitting one: nil when Do, Go or For would run it at
// once or queue it; else the error they would return there — ErrClosed,
// ctx's error, ErrSaturated (its queue is full), an error wrapping
// ErrSaturated (its queue stood above ClassOptions.MaxQueueWait), or one also
// wrapping ErrDeadline (its latency target cannot be met, beyond its
// class's late budget). It reserves nothing. Call it before the
// work a refused request should not cost — reading and decoding a large
// request body — with the ctx that carries the request's target
// (WithTarget, made when it arrives, with the Service it will need), then
// submit as usual: the submission's own door decides again, so a request
// allowed here can still be refused there (the queue grew meanwhile). A
// refusal is counted as a submission's would be (Rejected, Shed), so the
// shed rate an autoscaler reads stays whole; an allowed call counts
// nothing, a done ctx neither. It panics on a nil ctx or executor and
// returns an error for an invalid class. It allocates nothing.
func (e *Executor) Allow(ctx context.Context, c Class) error {
	mustCtx(ctx)
	mustExec(e)
	if !c.valid() {
		return invalidClass(c)
	}
	if e.g.isClosed() {
		e.stats[c].rejected.Add(1)
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return e.g.allow(ctx, c)
}

// allow is Allow's door: nil when a task of class c with ctx would take
// a free slot or queue now, else the refusal, counted.
func (g *granter) allow(ctx context.Context, c Class) error {
	if g.freeNow() {
		return nil // it would take a free slot at once: never judged at the door
	}
	w := waiter{class: c}
	g.setDue(ctx, &w, g.now())
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.queueAdmitLocked(ctx, &w, true)
}

// codelGrantLocked feeds the queue wait of a task of class c granted a
// slot now into its controller.
func (g *granter) codelGrantLocked(c Class, wait, t int64) {
	st := &g.shed[c]
	if st.target == 0 {
		return
	}
	st.minWait = min(st.minWait, wait)
	st.grants++
	g.codelTickLocked(c, t)
}

// codelTickLocked ends the interval once it has run its length: the class
// sheds during the next one if the smallest wait granted stayed above the
// target while the arrivals outran the slots (an interval without grants
// keeps the previous decision). An admission on the lock-free path (a
// free slot, nobody queued) is a wait of 0, as CoDel counts every
// packet's sojourn, not only the queued ones'.
func (g *granter) codelTickLocked(c Class, t int64) {
	st := &g.shed[c]
	interval := g.codelIntervalOf(c)
	if t-st.intervalStart < interval {
		return
	}
	admitted := g.cnt[c].admitted.Load()
	if atOnce := admitted - st.admittedAt; atOnce > st.grants {
		st.minWait = 0 // some took a free slot at once: the queue drained
		st.offered += int64(atOnce-st.grants) * g.cnt[c].avgSlotNs.Load()
		st.arrivals += atOnce - st.grants
	}
	completed := g.cnt[c].completed.Load()
	st.admittedAt, st.grants = admitted, 0
	// outrun: the interval's arrivals brought more work than the slots
	// could do in it; or, when some of them came without a given run time
	// (counted at the class average, which a server that has just started
	// learns from its short requests first), more of them arrived than
	// the class completed in it.
	capacity := float64(t-st.intervalStart) * g.serviceSlots()
	done := completed - st.completedAt
	outrun := float64(st.offered) > capacity || st.guessed && st.arrivals > done
	decay := math.Exp(-float64(t-st.intervalStart) / float64(shedOnsetHorizon))
	st.sumOffered = st.sumOffered*decay + float64(st.offered)
	st.sumCapacity = st.sumCapacity*decay + capacity
	st.sumArrivals = st.sumArrivals*decay + float64(st.arrivals)
	st.sumDone = st.sumDone*decay + float64(done)
	sustained := st.sumOffered > st.sumCapacity || st.guessed && st.sumArrivals > sustainedCount*st.sumDone
	severe := float64(st.offered) > backlogOutrun*capacity || st.guessed && st.arrivals > backlogOutrun*done
	switch {
	case st.shedding:
		// While it sheds, the queue is held near the target by the
		// shedding itself, and intervals under the target are the rule:
		// it stops once calm intervals — each refused nobody, or its
		// arrivals brought less work than the slots did in it — follow
		// one another for shedCalmArrivals arrivals or shedCalmTime.
		// (Stopping at the first interval under the target let the
		// queue grow toward the latency target for the intervals it took
		// to detect it again; stopping only when it refused nobody kept
		// a queue that stands now and then at 95 % of capacity shedding
		// a tenth of the arrivals; stopping after one calm interval let
		// an image server at 1.4x its capacity, 7 arrivals an interval,
		// stop after one in five intervals by chance and grow its queue
		// to twice the held depth before the test saw it stand again:
		// docs/architecture.md, "The
		// door".)
		if st.refused == 0 || !outrun {
			st.calmArrivals += st.arrivals
			st.calmFor += t - st.intervalStart
		} else {
			st.calmArrivals, st.calmFor = 0, 0
		}
		st.shedding = st.calmArrivals < shedCalmArrivals && st.calmFor < int64(shedCalmTime)
	case st.minWait != math.MaxInt64:
		// A queue standing while the arrivals fall behind the slots
		// drains by itself: shedding it refuses work the slots would do
		// in time (docs/architecture.md, "The
		// door").
		st.shedding = st.minWait > st.target && outrun && sustained
		st.calmArrivals, st.calmFor = 0, 0
	}
	st.severe = st.shedding && severe
	if st.minWait != math.MaxInt64 && st.minWait > st.target && done > 0 {
		// The queue stood above the target through the interval: every
		// slot the class could hold was busy.
		busy := capacity
		for k := range Class(NumClasses) {
			if k != c {
				busy -= float64(g.cnt[k].used.Load() - st.usedAt[k])
			}
		}
		if x := int64(busy / float64(done)); x > 0 {
			if st.perDone == 0 {
				st.perDone = x
			} else {
				st.perDone += (x - st.perDone) / 4
			}
			st.perDoneAt = t
		}
	}
	for k := range Class(NumClasses) {
		st.usedAt[k] = g.cnt[k].used.Load()
	}
	st.intervalStart, st.minWait, st.refused, st.offered = t, math.MaxInt64, 0, 0
	st.arrivals, st.completedAt, st.guessed = 0, completed, false
}

// standingWait is the door's mean queue-wait estimate for w, arriving at
// t with ahead tasks queued ahead of its place, while its class's queue
// stands: the tasks ahead plus half of the slots' running ones, each at
// the class's slot time per completion of its recent standing intervals
// (perDone, measured within the last two intervals), over the slots. ok
// is false — the door then sums the expected run times — for an arrival
// whose run time was given, and when none of the last two intervals
// stood. The slot time per completion counts the running tasks' time,
// which the average of completed slot times (avgSlotNs) cannot, and
// averages several intervals of completions: why, and what it measured,
// in docs/architecture.md, "The door".
func (g *granter) standingWait(w *waiter, t int64, ahead int) (int64, bool) {
	st := &g.shed[w.class]
	if w.declared != 0 || st.perDone == 0 || t-st.perDoneAt > 2*g.codelIntervalOf(w.class) {
		return 0, false
	}
	slots := g.serviceSlots()
	return int64((float64(ahead) + slots/2) * float64(st.perDone) / slots), true
}

// codelIntervalOf is class c's shedding interval, ns: codelInterval, or
// two of its average slot times if longer.
func (g *granter) codelIntervalOf(c Class) int64 {
	return max(int64(codelInterval), 2*g.cnt[c].avgSlotNs.Load())
}

// backlogWaits, backlogOutrun: a class shedding while its arrivals
// outrun the slots more than backlogOutrun times refuses, at the head of
// its queue, a task that has already waited more than backlogWaits times
// its queue-wait target (backlogLocked).
const (
	backlogWaits  = 2
	backlogOutrun = 2
)

// backlogLocked reports whether w, just taken from the head of its class
// at time t, is the backlog of a standing queue, to be refused rather
// than served: its class sheds and the last interval's arrivals outran
// the slots more than backlogOutrun times (at their expected run times,
// or, when some came without one, in number against the class's
// completions), w has waited more than backlogWaits times the class's
// queue-wait target, and another task of its class waits behind it (the
// last one is always served, so refusing never leaves a slot idle that
// the class could use). The backlog is what the door let in during the
// intervals before the standing-queue test could see the queue stand;
// the door holds later arrivals near the target, so serving that backlog
// first is what would keep the served requests far above the target once
// shedding has started. In a burst the slots will catch up with, the
// backlog is served: refusing it there would refuse requests served in
// time. Only submissions that never ran are refused, and in an
// auto-target class only those with a latency target.
func (g *granter) backlogLocked(w *waiter, t int64) bool {
	st := &g.shed[w.class]
	return st.severe && g.queues[w.class].n > 0 && // severe: shedding, so a target is set
		w.kind != waitHelper && !w.started && !w.requeued &&
		(!st.auto || w.target != targetNone) &&
		t-w.enq > backlogWaits*st.target
}

// shedBacklogLocked refuses w, found by backlogLocked, with an error
// wrapping ErrSaturated.
func (g *granter) shedBacklogLocked(w *waiter, t int64) {
	st := &g.shed[w.class]
	st.refused++
	g.refuseWithLocked(w, &shedError{class: w.class, reason: fmt.Sprintf(
		"its queue has stood above the queue-wait target %v for an interval and it has waited %v, more than %d times the target",
		time.Duration(st.target), time.Duration(t-w.enq).Round(time.Microsecond), backlogWaits)})
}

// offer counts w, an arrival at the door, in its class's interval.
func (st *shedState) offer(g *granter, w *waiter) {
	st.offered += g.serviceOf(w)
	st.arrivals++
	if w.declared == 0 {
		st.guessed = true
	}
}

// Background starvation guard: Background is served only when no other
// class waits, except that it gets a slot after backgroundEvery grants to
// other classes while it waits, or at once when its oldest task has waited
// backgroundMaxWait, so it always progresses under sustained load.
const (
	backgroundEvery   = 64
	backgroundMaxWait = time.Second
)
