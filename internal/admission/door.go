package admission

import (
	"context"
	"fmt"
	"math"
	"time"
)

// The door. A task that would queue is refused at once, with an error
// wrapping ErrSaturated, when:
//
//   - its class queue is full (ClassOptions.QueueLimit);
//   - its class's queue-wait controller sheds (controller.go: its states
//     and what moves them) and the arrival's mean estimated queue wait
//     (meanWaitLocked) is above what it holds — unless the arrival finds
//     its class queue empty, has no latency target in a class whose
//     target follows the latency targets, or is of a key within its share
//     (keys.go);
//   - it has a latency target (WithTarget, its ctx deadline,
//     ClassOptions.LatencyTarget) that it cannot meet: its estimated
//     queue wait, plus doorSpread times that estimate's spread, plus its
//     own expected run time (ownRun) end past its due, and it has a ctx
//     deadline or its class's late budget is spent (the error also wraps
//     ErrDeadline). A target is judged so only while its class sheds or
//     its recent arrivals outran the slots
//     (queueController.queuesUnjudged); else the task queues and the
//     head judges it.
//
// At the head of its queue a task is refused, with the same kinds of
// error, when it would now end past its due (lateLocked) or is the
// backlog of a severe overload (backlogLocked).
//
// Everything here runs under the executor's lock, on the path of a task
// that queues anyway; the admission fast path never pays for it.

// shedError is a refusal that says why, with the numbers it was decided
// on; it wraps ErrSaturated, and ErrDeadline when a latency target could
// not be met. It keeps the numbers and writes its text only when read:
// a refusal costs no formatting under the lock.
type shedError struct {
	class    Class
	deadline bool
	rule     shedRule
	// The numbers the rule was decided on: durations in ns (ahead: tasks;
	// held: the standing limit's held share, 1 when not held).
	target, wait, own, left int64
	ahead                   int
	held                    float64
}

// shedRule is the rule that refused a task.
type shedRule uint8

const (
	shedSpent    shedRule = iota // the CPU budget spent, no slot free
	shedStanding                 // a standing queue above its wait target (auto: the derived target)
	shedStandingAuto
	shedBacklog  // the backlog of a severe overload, at the head
	shedNoLonger // at the head: its latency target can no longer be met
	shedLate     // at the door: the estimate ends past its latency target
)

func (e *shedError) Error() string {
	return "cpuwork: " + e.class.String() + " task shed: " + e.reason()
}

// us is d rounded to the microsecond, as a refusal prints it.
func us(d int64) time.Duration { return time.Duration(d).Round(time.Microsecond) }

func (e *shedError) reason() string {
	switch e.rule {
	case shedSpent:
		return "it sheds while the CPU budget is spent (the quota, not the slots, bounds the work): it holds no queue, and no slot was free"
	case shedStanding, shedStandingAuto:
		why := "ClassOptions.MaxQueueWait"
		if e.rule == shedStandingAuto {
			why = fmt.Sprintf("%d slot times of the class, within 1/%d and 1/2 of the latency target; refused above %d times it", serviceQueue, standingShare, standingPeak)
			if e.held < 1 {
				why += fmt.Sprintf(", held at %.3g of that while the slots stay busy without more queue", e.held)
			}
		}
		return fmt.Sprintf("its queue has stood above the queue-wait target %v for an interval (%s) and its estimated wait is %v", time.Duration(e.target), why, us(e.wait))
	case shedBacklog:
		return fmt.Sprintf("its queue has stood above the queue-wait target %v for an interval and it has waited %v, more than %d times the target",
			time.Duration(e.target), us(e.wait), backlogWaits)
	case shedNoLonger:
		return fmt.Sprintf("its latency target can no longer be met: %v left, expected run time %v", us(e.left), us(e.own))
	default:
		return fmt.Sprintf("its latency target is in %v but the estimated queue wait is %v (%d tasks ahead) and its expected run time %v",
			us(e.left), us(e.wait), e.ahead, us(e.own))
	}
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
// and the late budget is read, not sampled). t is the arrival's time,
// read before the lock.
func (g *Granter) queueAdmitLocked(ctx context.Context, w *Waiter, t int64, peek bool) error {
	c := w.class
	s := g.cnt[c]
	switch {
	case g.closed.Load():
		s.Rejected.Add(1)
		return ErrClosed
	case ctx.Err() != nil:
		if !peek {
			s.Canceled.Add(1)
		}
		return ctx.Err()
	case g.queues[c].n >= g.limit[c]:
		s.Rejected.Add(1)
		return ErrSaturated
	}
	q := &g.shed[c]
	if !peek {
		g.offerLocked(w) // Allow's call counts when it refuses: an allowed one is submitted next
	}
	if w.target != targetNone && w.due > t && q.autoTarget(w.due-t, g.cnt[c].AvgSlotNs.Load()) {
		g.shedOn.Or(1 << c)
	}
	if q.target > 0 && (g.queues[c].n > 0 || g.spentLocked(c)) && (!q.auto || w.target != targetNone) {
		g.codelTickLocked(c, t)
		spent := g.spentLocked(c)
		wait, _ := g.meanWaitLocked(w, t) // the estimate without its spread
		limit := q.heldLimit()
		if !q.sheds() && wait > limit && q.earlyOnset(g.readLocked(c, t)) {
			g.markShedLocked(c)
		}
		if q.refuses(wait, limit, spent, q.auto && g.keySpared(w)) {
			if peek {
				g.offerLocked(w)
			}
			s.Rejected.Add(1)
			s.Shed.Add(1)
			if spent {
				return &shedError{class: c, rule: shedSpent}
			}
			e := &shedError{class: c, rule: shedStanding, target: q.target, wait: wait, held: 1}
			if q.auto {
				e.rule, e.held = shedStandingAuto, q.holdShare()
			}
			return e
		}
	}
	if err := g.doorLocked(w, t, peek); err != nil {
		if peek {
			g.offerLocked(w)
		}
		s.Rejected.Add(1)
		s.Shed.Add(1)
		return err
	}
	return nil
}

// Allow is Allow's door: nil when a task of class c with ctx would take
// a free slot or queue now, else the refusal, counted.
func (g *Granter) Allow(ctx context.Context, c Class) error {
	if g.freeNow(c) {
		return nil // it would take a free slot at once: never judged at the door
	}
	w := Waiter{class: c}
	t := g.now()
	g.setDue(ctx, &w, t)
	key, keyed := KeyOf(ctx)
	g.lock()
	defer g.unlock()
	g.keyRankLocked(key, keyed, &w, t)
	err := g.queueAdmitLocked(ctx, &w, t, true)
	if err != nil {
		keyRefused(&w)
	}
	return err
}

// readLocked reads class c's counters at t for its controller.
func (g *Granter) readLocked(c Class, t int64) reading {
	r := reading{t: t, admitted: g.cnt[c].Admitted.Load(), completed: g.cnt[c].Completed.Load(),
		avgSlot: g.cnt[c].AvgSlotNs.Load(), slots: g.serviceSlots()}
	if q, n := math.Float64frombits(g.quotaCores.Load()), float64(g.nslots.Load()); q > 0 && q < n {
		r.spare = 1 - q/n
	}
	for k := range Class(NumClasses) {
		r.used[k] = g.cnt[k].Used.Load()
		if k != c && g.sameSide(k, c) {
			r.others |= 1 << k
			if k > c {
				r.lower |= 1 << k
				r.lowerWaiting = r.lowerWaiting || g.queues[k].n > 0
			}
		}
	}
	return r
}

// offerLocked counts w, an arrival at the door, in its class's interval.
func (g *Granter) offerLocked(w *Waiter) {
	g.shed[w.class].offer(g.serviceOf(w), w.declared != 0)
}

// codelGrantLocked feeds the queue wait of a task of class c granted a
// slot now into its controller.
func (g *Granter) codelGrantLocked(c Class, wait, t int64) {
	q := &g.shed[c]
	if q.target == 0 {
		return
	}
	q.granted(wait)
	g.codelTickLocked(c, t)
}

// codelTickLocked ends class c's interval if it has run its length by t.
func (g *Granter) codelTickLocked(c Class, t int64) {
	if !g.shed[c].due(t, g.cnt[c].AvgSlotNs.Load()) {
		return
	}
	g.shed[c].endInterval(g.readLocked(c, t))
	g.markShedLocked(c)
}

// standingWait is the door's mean queue-wait estimate for w, arriving at
// t with ahead tasks queued ahead of its place, while its class's queue
// stands: the tasks ahead plus half of the slots' running ones, each at
// the class's slot time per completion of its recent standing intervals,
// over the slots. ok is false — the door then sums the expected run
// times — for an arrival whose run time was given, and when none of the
// last two intervals stood. The slot time per completion counts the
// running tasks' time, which the average of completed slot times cannot:
// a server that has just started learns that average from its short
// requests first.
func (g *Granter) standingWait(w *Waiter, t int64, ahead int) (int64, bool) {
	if w.declared != 0 {
		return 0, false
	}
	per, ok := g.shed[w.class].perCompletion(t, intervalLen(g.cnt[w.class].AvgSlotNs.Load()))
	if !ok {
		return 0, false
	}
	slots := g.serviceSlots()
	return int64((float64(ahead) + slots/2) * float64(per) / slots), true
}

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
// auto-target class only those with a latency target and not of a key
// within its share (keys.go).
func (g *Granter) backlogLocked(w *Waiter, t int64) bool {
	q := &g.shed[w.class]
	return q.refusesBacklog(t-w.enq, g.spentLocked(w.class)) && g.queues[w.class].n > 0 &&
		w.kind != KindHelper && !w.started && !w.requeued &&
		(!q.auto || w.target != targetNone) && !(q.auto && g.keySpared(w))
}

// spentLocked reports whether class c holds no queue because the CPU
// budget is spent (SetBudgetSpent; queueController.spent).
func (g *Granter) spentLocked(c Class) bool { return g.shed[c].spent(g.budgetSpent.Load()) }

// markShedLocked records in sheddingMask whether class c sheds in a clear
// overload.
func (g *Granter) markShedLocked(c Class) {
	if g.shed[c].mode == overload {
		g.sheddingMask.Or(1 << c)
	} else {
		g.sheddingMask.And(^uint32(1 << c))
	}
}

// shedBacklogLocked refuses w, found by backlogLocked, with an error
// wrapping ErrSaturated.
func (g *Granter) shedBacklogLocked(w *Waiter, t int64) {
	q := &g.shed[w.class]
	q.iv.refused++
	g.refuseWithLocked(w, &shedError{class: w.class, rule: shedBacklog, target: q.target, wait: t - w.enq})
}

// Background starvation guard: Background is served only when no other
// class waits, except that it gets a slot after BackgroundEvery grants to
// other classes while it waits, or at once when its oldest task has waited
// BackgroundMaxWait, so it always progresses under sustained load.
const (
	BackgroundEvery   = 64
	BackgroundMaxWait = time.Second
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
// to end past its ctx deadline is always refused, at the door and at the
// head, whether or not an objective comes before it. The share is a moving
// average with weight 1/1024 per queued objective task (each door pass
// counts one, a late pass at the head one more), in 1/2^24: after a
// fresh start or a long on-time stretch about ten late tasks in a row go
// through, then about one in a hundred. Its cost: a few integer
// operations under the lock, on the path of a task that queues anyway.
const (
	lateOne    = 1 << 24       // the share's unit: 1 = lateOne
	lateBudget = lateOne / 100 // 1 %
	lateShift  = 10            // a moving average over about the last 1024 samples
)

// lateOKLocked takes one sample of class c's late budget: whether a task
// expected to miss its objective may go on (late true), or an on-time one
// (late false, always true).
func (g *Granter) lateOKLocked(c Class, late bool) bool {
	s := &g.lateShare[c]
	ok := !late || g.lateRoomLocked(c)
	x := int32(0)
	if late && ok {
		x = lateOne
		g.cnt[c].Late.Add(1)
	}
	*s += (x - *s) >> lateShift
	return ok
}

// lateRoomLocked reports whether class c's late budget has room, without
// taking a sample (Allow reads it so).
func (g *Granter) lateRoomLocked(c Class) bool { return g.lateShare[c] < lateBudget }

// lateLocked reports whether w, at the head of its class at time t, is
// to be refused: less time is left than its expected run time (it would
// end past its due), and its due is its ctx deadline, or it would end
// past a ctx deadline later than its objective, or its class's late
// budget is spent. Only submissions that have a target and never ran are
// refused: a late large request would delay every small one behind it.
func (g *Granter) lateLocked(w *Waiter, t int64) bool {
	if w.target == targetNone || w.started || w.requeued || w.kind == KindHelper {
		return false
	}
	end := t + g.ownRun(w, g.queues[w.class].n == 0)
	if end <= w.due {
		return false
	}
	return w.target == targetDeadline || w.hard != 0 && end > w.hard || !g.lateOKLocked(w.class, true)
}

// refuseLocked takes w, just out of the queue at t, out for good with an error
// wrapping ErrSaturated and ErrDeadline: a blocked caller is woken
// without a slot, a task fails after the lock is released (unlockAndWake).
func (g *Granter) refuseLocked(w *Waiter, t int64) {
	g.refuseWithLocked(w, &shedError{class: w.class, deadline: true, rule: shedNoLonger,
		left: w.due - t, own: g.ownRun(w, g.queues[w.class].n == 0)})
}

// refuseWithLocked takes w, just out of the queue, out for good with err
// (counted as rejected and shed).
func (g *Granter) refuseWithLocked(w *Waiter, err *shedError) {
	s := g.cnt[w.class]
	s.Rejected.Add(1)
	s.Shed.Add(1)
	keyRefused(w)
	g.keyDone(w)
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
// the margin are near 0. With nothing queued ahead (n = 0) there is no
// sum and no margin: one run time's spread under heavy tails is larger
// than the median.
const doorSpread = 2

// meanWaitLocked is the door's mean estimate of the queue wait of w,
// arriving at t, ns: the expected run time of the work queued ahead of
// its place (in its own class up to its due, and in every more urgent
// class) plus half of the running tasks' expected run time, divided by
// the slots (while the queue stands, for an arrival without a given run
// time, standingWait: door.go); and the number of tasks queued ahead of
// it.
func (g *Granter) meanWaitLocked(w *Waiter, t int64) (wait int64, ahead int) {
	_, ahead, work := g.queues[w.class].place(w.rank)
	for k := Critical; k < w.class; k++ {
		if g.sameSide(k, w.class) {
			ahead += g.queues[k].n
			work += g.queues[k].work
		}
	}
	if x, ok := g.standingWait(w, t, ahead); ok {
		return x, ahead
	}
	var running int64
	for k := range g.share.inflight {
		if g.sameSide(Class(k), w.class) {
			running += g.share.inflight[k].Load()
		}
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
// budget lasts. While its class leaves targets to the head
// (queueController.queuesUnjudged) nothing is judged here.
func (g *Granter) doorLocked(w *Waiter, t int64, peek bool) error {
	if w.target == targetNone || g.slots <= 0 ||
		g.shed[w.class].queuesUnjudged(g.readLocked(w.class, t)) {
		return nil
	}
	wait, ahead := g.meanWaitLocked(w, t)
	slots := g.serviceSlots()
	if dev := g.cnt[w.class].DevSlotNs.Load(); dev > 0 && ahead > 0 {
		// The spread of the estimate: n run times that each miss their
		// expectation by dev on average sum to within ~sqrt(n) x dev of
		// theirs, and a queue estimated at its mean is late half the
		// time for the arrival at its edge. With nothing queued ahead
		// there is no sum: the running tasks count at their mean half.
		wait += int64(doorSpread * float64(dev) * math.Sqrt(float64(ahead)) / slots)
	}
	own := g.ownRun(w, g.queues[w.class].n == 0)
	end := t + wait + own
	late := end > w.due
	if w.target == targetObjective {
		if w.hard != 0 && end > w.hard {
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
	return &shedError{class: w.class, deadline: true, rule: shedLate, left: w.due - t, wait: wait, ahead: ahead, own: own}
}
