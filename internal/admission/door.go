package admission

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
//     while a task queued: fracPacer.capacity), plus twice that sum's spread (sqrt of the tasks queued ahead times
//     how far slot times recently fell from what was expected of them:
//     doorSpread, door.go), plus its own expected run time (its given
//     one; else its class's median run time while none of its class is
//     queued, the average while some are: ownRun), end past its
//     due (while its class's queue stands and its run time was not given,
//     the queue wait is the tasks ahead, plus half the slots, times the
//     class's slot time per completion of its standing intervals, over
//     the slots: standingWait), and it
//     has a ctx deadline or its class's late budget is spent (door.go;
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
//     The shedding starts before the interval ends when an arrival's
//     mean estimated wait passes what a shedding class admits while the
//     arrivals so far outrun the slots by earlyOutrun (outrunSoFarLocked).
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

// shedState is one class's queue-wait controller. Guarded by the Granter's mu.
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
	// slots more than backlogOutrun times (backlogLocked); clear: more
	// than earlyOutrun times, in the interval and over the recent ones
	// (spentLocked), or the shedding started early.
	severe, clear bool
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
	// hold is the share of its held queue (standingPeak times the
	// target) that a shedding class without ClassOptions.MaxQueueWait
	// admits up to (0 stands for 1): 1 when the shedding starts, lowered after each
	// interval in which (nearly) no arrival found a free slot — the slots
	// never idled, so the queue bought no work, only wait — and raised
	// after one in which arrivals found slots free (holdIdleLow,
	// holdIdleHigh).
	hold float64
	// holdSeen, holdFree: the arrivals since the hold last moved, and
	// those of them that took a free slot at once.
	holdSeen, holdFree uint64
}

// holdShare is st.hold, 1 for its zero value.
func (st *shedState) holdShare() float64 {
	if st.hold == 0 {
		return 1
	}
	return st.hold
}

// holdIdleLow, holdIdleHigh, holdDown, holdUp, holdMin: once a
// shedding class has seen holdArrivals arrivals since its hold last
// moved, the hold is multiplied by holdDown if at most holdIdleLow of
// them took a free slot at once, and by holdUp, up to 1, if more than
// holdIdleHigh did; never below holdMin. Poisson arrivals see the
// slots as time does (PASTA): the share that found a slot free is the
// share of the time one idled, so the hold settles at the shortest queue
// that keeps the slots busy but for a few percent of the time.
const (
	holdIdleLow  = 0.01
	holdIdleHigh = 0.03
	holdDown     = 0.7
	holdUp       = 1.5
	holdMin      = 1.0 / 64
	holdArrivals = 64
	// holdEarly is the hold an overload starts at when it starts before
	// its interval ends (outrunning the slots 1.5 times): at that rate the
	// slots stay busy without the whole held queue, and moving down from
	// 1 by holdDown every holdArrivals takes longer than a short overload
	// lasts; holdUp raises it where arrivals then find slots free.
	holdEarly = 0.25
)

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

// earlyOutrun: a class whose queue stands past its held peak starts
// shedding before its interval ends when the arrivals of the interval so
// far (a quarter of it at least) and of the recent intervals with it
// brought over earlyOutrun times what the slots could do (by work, or by
// arrivals over completions): at twice the capacity an image server
// queued 11-22 requests in the 200 ms the test at the interval's end
// took, served near the objective; a burst at 80 % of capacity brings
// under 1.5 times the slots' work over a quarter of an interval.
const earlyOutrun = 1.5

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
// and the late budget is read, not sampled). t is the arrival's time,
// read before the lock.
func (g *Granter) queueAdmitLocked(ctx context.Context, w *Waiter, t int64, peek bool) error {
	c := w.Class
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
	st := &g.shed[c]
	if !peek {
		st.offer(g, w) // Allow's call counts when it refuses: an allowed one is submitted next
	}
	if (st.target == 0 || st.auto) && w.target != targetNone && w.Due > t {
		st.target, st.auto = autoQueueTarget(w.Due-t, g.cnt[c].AvgSlotNs.Load()), true
		g.shedOn.Or(1 << c)
	}
	if st.target > 0 && (g.queues[c].n > 0 || g.spentLocked(c)) && (!st.auto || w.target != targetNone) {
		g.codelTickLocked(c, t)
		limit := st.target
		if st.auto {
			limit = int64(float64(limit*standingPeak) * st.holdShare())
		}
		spent := g.spentLocked(c)
		if spent {
			limit = 0
		}
		var wait int64 // the arrival's mean estimated queue wait, read only while shedding or past the limit
		if st.shedding {
			wait, _ = g.meanWaitLocked(w, t)
		} else if wait, _ = g.meanWaitLocked(w, t); wait > limit && g.outrunSoFarLocked(c, t) {
			g.startShedLocked(c)
		}
		// A task of a key within its share is not refused for the queue
		// the class's other keys stand (its latency target still is,
		// below): keys.go.
		spared := st.auto && g.keySpared(w)
		if st.shedding && (wait > limit || spent) && !spared {
			st.refused++
			if peek {
				st.offer(g, w)
			}
			s.Rejected.Add(1)
			s.Shed.Add(1)
			why := "ClassOptions.MaxQueueWait"
			if st.auto {
				why = fmt.Sprintf("%d slot times of the class, within 1/%d and 1/2 of the latency target; refused above %d times it", serviceQueue, standingShare, standingPeak)
				if h := st.holdShare(); h < 1 {
					why += fmt.Sprintf(", held at %.3g of that while the slots stay busy without more queue", h)
				}
			}
			if spent {
				return &shedError{class: c, reason: "it sheds while the CPU budget is spent (the quota, not the slots, bounds the work): it holds no queue, and no slot was free"}
			}
			return &shedError{class: c, reason: fmt.Sprintf("its queue has stood above the queue-wait target %v for an interval (%s) and its estimated wait is %v", time.Duration(st.target), why, time.Duration(wait).Round(time.Microsecond))}
		}
	}
	if err := g.doorLocked(ctx, w, t, peek); err != nil {
		if peek {
			st.offer(g, w)
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
	w := Waiter{Class: c}
	t := g.now()
	g.SetDue(ctx, &w, t)
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

// outrunSoFarLocked reports whether class c's arrivals outran its slots
// both in the interval so far (from its start to t) and over the recent
// intervals together with it: the onset test's two conditions, read
// before the interval's end.
func (g *Granter) outrunSoFarLocked(c Class, t int64) bool {
	st := &g.shed[c]
	el := t - st.intervalStart
	if el < g.codelIntervalOf(c)/4 {
		return false
	}
	admitted := g.cnt[c].Admitted.Load()
	offered, arrivals := float64(st.offered), float64(st.arrivals)
	if atOnce := admitted - st.admittedAt; atOnce > st.grants {
		offered += float64(int64(atOnce-st.grants) * g.cnt[c].AvgSlotNs.Load())
		arrivals += float64(atOnce - st.grants)
	}
	capacity := float64(el) * g.ServiceSlots()
	done := float64(g.cnt[c].Completed.Load() - st.completedAt)
	decay := math.Exp(-float64(el) / float64(shedOnsetHorizon))
	outrun, sustained := st.outrun(earlyOutrun, offered, capacity, arrivals, done, decay)
	return outrun && sustained
}

// outrun reports whether arrivals that brought offered ns of work
// (arrivals of them, against done completions) over a stretch in which
// the slots could do capacity ns outran the slots k times: in the
// stretch alone, and over the recent intervals together with it (their
// sums weighted by decay, the stretch's own at 1). When some arrivals
// came without a given run time (guessed), arrivals over completions
// count too, the recent ones against sustainedCount times k.
func (st *shedState) outrun(k, offered, capacity, arrivals, done, decay float64) (stretch, recent bool) {
	stretch = offered > k*capacity || st.guessed && arrivals > k*done
	recent = st.sumOffered*decay+offered > k*(st.sumCapacity*decay+capacity) ||
		st.guessed && st.sumArrivals*decay+arrivals > k*sustainedCount*(st.sumDone*decay+done)
	return stretch, recent
}

// startShedLocked starts class c's shedding before its interval ends,
// its queue held at holdEarly.
func (g *Granter) startShedLocked(c Class) {
	st := &g.shed[c]
	st.shedding = true
	st.calmArrivals, st.calmFor = 0, 0
	st.hold, st.holdSeen, st.holdFree = holdEarly, 0, 0
	st.clear = true // the arrivals so far brought over earlyOutrun times the slots' work
	g.markShedLocked(c)
}

// codelGrantLocked feeds the queue wait of a task of class c granted a
// slot now into its controller.
func (g *Granter) codelGrantLocked(c Class, wait, t int64) {
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
func (g *Granter) codelTickLocked(c Class, t int64) {
	st := &g.shed[c]
	interval := g.codelIntervalOf(c)
	if t-st.intervalStart < interval {
		return
	}
	admitted := g.cnt[c].Admitted.Load()
	var free uint64 // the interval's arrivals that took a free slot at once
	if atOnce := admitted - st.admittedAt; atOnce > st.grants {
		free = atOnce - st.grants
		st.minWait = 0 // some took a free slot at once: the queue drained
		st.offered += int64(atOnce-st.grants) * g.cnt[c].AvgSlotNs.Load()
		st.arrivals += atOnce - st.grants
	}
	completed := g.cnt[c].Completed.Load()
	st.admittedAt, st.grants = admitted, 0
	// outrun: the interval's arrivals brought more work than the slots
	// could do in it; or, when some of them came without a given run time
	// (counted at the class average, which a server that has just started
	// learns from its short requests first), more of them arrived than
	// the class completed in it.
	capacity := float64(t-st.intervalStart) * g.ServiceSlots()
	done := completed - st.completedAt
	decay := math.Exp(-float64(t-st.intervalStart) / float64(shedOnsetHorizon))
	offered, arrivals := float64(st.offered), float64(st.arrivals)
	outrun, sustained := st.outrun(1, offered, capacity, arrivals, float64(done), decay)
	severe, _ := st.outrun(backlogOutrun, offered, capacity, arrivals, float64(done), decay)
	// clear: a clear overload, in the interval and over the recent ones
	// (one interval of a few large requests outruns the slots 1.5 times
	// by chance at capacity).
	clearNow, clearRecent := st.outrun(earlyOutrun, offered, capacity, arrivals, float64(done), decay)
	st.clear = clearNow && clearRecent
	st.sumOffered = st.sumOffered*decay + offered
	st.sumCapacity = st.sumCapacity*decay + capacity
	st.sumArrivals = st.sumArrivals*decay + arrivals
	st.sumDone = st.sumDone*decay + float64(done)
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
		st.holdSeen += st.arrivals
		st.holdFree += free
		if st.holdSeen >= holdArrivals {
			switch idle := float64(st.holdFree) / float64(st.holdSeen); {
			case idle <= holdIdleLow:
				st.hold = max(holdMin, st.holdShare()*holdDown)
			case idle > holdIdleHigh:
				st.hold = min(1, st.holdShare()*holdUp)
			}
			st.holdSeen, st.holdFree = 0, 0
		}
	case st.minWait != math.MaxInt64:
		// A queue standing while the arrivals fall behind the slots
		// drains by itself: shedding it refuses work the slots would do
		// in time (docs/architecture.md, "The
		// door").
		st.shedding = st.minWait > st.target && outrun && sustained
		st.calmArrivals, st.calmFor = 0, 0
		st.hold, st.holdSeen, st.holdFree = 0, 0, 0
	}
	st.severe = st.shedding && severe
	g.markShedLocked(c)
	if st.minWait != math.MaxInt64 && st.minWait > st.target && done > 0 {
		// The queue stood above the target through the interval: every
		// slot the class could hold was busy.
		busy := capacity
		for k := range Class(NumClasses) {
			if k != c && g.sameSide(k, c) {
				busy -= float64(g.cnt[k].Used.Load() - st.usedAt[k])
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
		st.usedAt[k] = g.cnt[k].Used.Load()
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
func (g *Granter) standingWait(w *Waiter, t int64, ahead int) (int64, bool) {
	st := &g.shed[w.Class]
	if w.Declared != 0 || st.perDone == 0 || t-st.perDoneAt > 2*g.codelIntervalOf(w.Class) {
		return 0, false
	}
	slots := g.ServiceSlots()
	return int64((float64(ahead) + slots/2) * float64(st.perDone) / slots), true
}

// codelIntervalOf is class c's shedding interval, ns: codelInterval, or
// two of its average slot times if longer.
func (g *Granter) codelIntervalOf(c Class) int64 {
	return max(int64(codelInterval), 2*g.cnt[c].AvgSlotNs.Load())
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
// auto-target class only those with a latency target and not of a key
// within its share (keys.go).
func (g *Granter) backlogLocked(w *Waiter, t int64) bool {
	st := &g.shed[w.Class]
	spent := g.spentLocked(w.Class)
	waits := backlogWaits * st.target
	if spent {
		waits = 0 // what the door let in before it knew the budget spent
	}
	return (st.severe || spent) && g.queues[w.Class].n > 0 && // either: shedding, so a target is set
		w.Kind != KindHelper && !w.Started && !w.Requeued &&
		(!st.auto || w.target != targetNone) && !(st.auto && g.keySpared(w)) &&
		t-w.Enq > waits
}

// spentLocked reports whether class c, without ClassOptions.MaxQueueWait,
// sheds in a clear overload (its last interval's arrivals, and the
// recent intervals' with them, brought over earlyOutrun times the slots'
// work) while the CPU budget is spent
// (SetBudgetSpent): it then holds no queue. A queue keeps the slots busy
// between arrivals; when the quota, not the slots, bounds the work, the
// slots' idle moments leave no CPU idle and a queued task only waits for
// CPU the period does not have. Near capacity the held queue stays: it
// rides out the bursts that start a shedding there.
func (g *Granter) spentLocked(c Class) bool {
	st := &g.shed[c]
	return st.auto && st.shedding && st.clear && g.budgetSpent.Load()
}

// SetBudgetSpent says whether the CPU budget is spent for now: the
// fractional quota's pacer would close its extra slot (the period's
// quota is on pace to be used) or the last period was throttled.
func (g *Granter) SetBudgetSpent(spent bool) { g.budgetSpent.Store(spent) }

// Shedding reports whether any class sheds now in a clear overload (its
// arrivals brought over earlyOutrun times the slots' work, in its last
// interval and over the recent ones).
func (g *Granter) Shedding() bool { return g.sheddingMask.Load() != 0 }

// markShedLocked records in sheddingMask whether class c sheds in a clear
// overload.
func (g *Granter) markShedLocked(c Class) {
	if st := &g.shed[c]; st.shedding && st.clear {
		g.sheddingMask.Or(1 << c)
	} else {
		g.sheddingMask.And(^uint32(1 << c))
	}
}

// shedBacklogLocked refuses w, found by backlogLocked, with an error
// wrapping ErrSaturated.
func (g *Granter) shedBacklogLocked(w *Waiter, t int64) {
	st := &g.shed[w.Class]
	st.refused++
	g.refuseWithLocked(w, &shedError{class: w.Class, reason: fmt.Sprintf(
		"its queue has stood above the queue-wait target %v for an interval and it has waited %v, more than %d times the target",
		time.Duration(st.target), time.Duration(t-w.Enq).Round(time.Microsecond), backlogWaits)})
}

// offer counts w, an arrival at the door, in its class's interval.
func (st *shedState) offer(g *Granter, w *Waiter) {
	st.offered += g.serviceOf(w)
	st.arrivals++
	if w.Declared == 0 {
		st.guessed = true
	}
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
// end past its due), and its due is its ctx deadline or its class's late
// budget is spent. Only submissions that have a target and never ran are
// refused. (Letting every objective task with time left run, since it has
// waited already, made the service scenario shed more, not less: a late
// large request delays every small one behind it:
// docs/raw/late-budget-ab-2026-11-24.txt.)
func (g *Granter) lateLocked(w *Waiter, t int64) bool {
	if w.target == targetNone || w.Started || w.Requeued || w.Kind == KindHelper || t+g.ownRun(w, g.queues[w.Class].n == 0) <= w.Due {
		return false
	}
	return w.target == targetDeadline || !g.lateOKLocked(w.Class, true)
}

// refuseLocked takes w, just out of the queue at t, out for good with an error
// wrapping ErrSaturated and ErrDeadline: a blocked caller is woken
// without a slot, a task fails after the lock is released (unlockAndWake).
func (g *Granter) refuseLocked(w *Waiter, t int64) {
	left := time.Duration(w.Due - t)
	g.refuseWithLocked(w, &shedError{class: w.Class, deadline: true, reason: fmt.Sprintf(
		"its latency target can no longer be met: %v left, expected run time %v", left.Round(time.Microsecond),
		time.Duration(g.ownRun(w, g.queues[w.Class].n == 0)).Round(time.Microsecond))})
}

// refuseWithLocked takes w, just out of the queue, out for good with err
// (counted as rejected and shed).
func (g *Granter) refuseWithLocked(w *Waiter, err *shedError) {
	s := g.cnt[w.Class]
	s.Rejected.Add(1)
	s.Shed.Add(1)
	keyRefused(w)
	g.KeyDone(w)
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
// sum and no margin: under heavy tails one run time's spread is larger
// than the median, and it refused arrivals that the running tasks' end,
// or a Checkpoint, would have let in at once.
const doorSpread = 2

// meanWaitLocked is the door's mean estimate of the queue wait of w,
// arriving at t, ns: the expected run time of the work queued ahead of
// its place (in its own class up to its due, and in every more urgent
// class) plus half of the running tasks' expected run time, divided by
// the slots (while the queue stands, for an arrival without a given run
// time, standingWait: door.go); and the number of tasks queued ahead of
// it.
func (g *Granter) meanWaitLocked(w *Waiter, t int64) (wait int64, ahead int) {
	_, ahead, work := g.queues[w.Class].place(w.Rank)
	for k := Critical; k < w.Class; k++ {
		if g.sameSide(k, w.Class) {
			ahead += g.queues[k].n
			work += g.queues[k].work
		}
	}
	if x, ok := g.standingWait(w, t, ahead); ok {
		return x, ahead
	}
	var running int64
	for k := range g.share.inflight {
		if g.sameSide(Class(k), w.Class) {
			running += g.share.inflight[k].Load()
		}
	}
	return int64(float64(work+running/2) / g.ServiceSlots()), ahead
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
func (g *Granter) doorLocked(ctx context.Context, w *Waiter, t int64, peek bool) error {
	if w.target == targetNone || g.slots <= 0 {
		return nil
	}
	wait, ahead := g.meanWaitLocked(w, t)
	slots := g.ServiceSlots()
	if dev := g.cnt[w.Class].DevSlotNs.Load(); dev > 0 && ahead > 0 {
		// The spread of the estimate: n run times that each miss their
		// expectation by dev on average sum to within ~sqrt(n) x dev of
		// theirs, and a queue estimated at its mean is late half the
		// time for the arrival at its edge. With nothing queued ahead
		// there is no sum: the running tasks count at their mean half.
		wait += int64(doorSpread * float64(dev) * math.Sqrt(float64(ahead)) / slots)
	}
	own := g.ownRun(w, g.queues[w.Class].n == 0)
	end := t + wait + own
	late := end > w.Due
	if w.target == targetObjective {
		if dl, ok := ctx.Deadline(); ok && end > int64(dl.Sub(epoch)) {
			late = true // past its ctx deadline too: no budget for that
		} else if peek {
			if !late || g.lateRoomLocked(w.Class) {
				return nil // Allow: the budget read, not sampled
			}
		} else if g.lateOKLocked(w.Class, late) {
			if late {
				w.target = targetNone // let through late once: not judged again at the head (its due still orders it)
			}
			return nil
		}
	}
	if !late {
		return nil
	}
	return &shedError{class: w.Class, deadline: true, reason: fmt.Sprintf(
		"its latency target is in %v but the estimated queue wait is %v (%d tasks ahead) and its expected run time %v",
		time.Duration(w.Due-t).Round(time.Microsecond), time.Duration(wait).Round(time.Microsecond), ahead,
		time.Duration(own).Round(time.Microsecond))}
}
