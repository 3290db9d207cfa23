package admission

import (
	"math"
	"time"
)

// The queue-wait controller: one per class, CoDel's test (Nichols and
// Jacobson, "Controlling Queue Delay", ACM Queue 2012) applied at the
// door instead of at the head. It has no lock and no clock: the Granter
// feeds it, under its lock, each arrival's expected work, each queued
// grant's wait, the arrivals it refused, and at the end of each interval
// a reading of the class's counters with the time; it answers whether an
// arrival with a given mean estimated queue wait is refused, whether a
// task at the head is backlog to refuse, and what a standing queue's
// wait is per task.
//
// Its states, and what moves it between them:
//
//   - calm: nobody is refused for the queue; an arrival's latency target
//     is judged by the Granter's estimate only once the recent arrivals
//     outrun the slots (queuesUnjudged). Left for shedding when an
//     interval ends whose smallest granted queue wait stood above the
//     target while its arrivals outran the slots, in the interval and
//     over the recent intervals together (onset); left for overload
//     before the interval ends when an arrival's mean estimated wait
//     passes the held limit while the arrivals so far outran the slots
//     earlyOutrun times (early onset).
//   - shedding: arrivals whose mean estimated queue wait is above the
//     held limit are refused: the target with ClassOptions.MaxQueueWait,
//     else standingPeak times it, times the hold. Left for calm once
//     calm intervals in a row (each refused nobody, or its arrivals did
//     not outrun the slots) held shedCalmArrivals arrivals or lasted
//     shedCalmTime.
//   - overload: shedding in a clear overload — the last interval's
//     arrivals, and the recent intervals' with them, brought over
//     earlyOutrun times the slots' work (or it began by early onset).
//     Granter.Shedding reports it; while the CPU budget is spent, an
//     auto-target class in it holds no queue (spent). Moves between
//     shedding and overload as each interval ends.
//
// While it sheds, severe marks an interval whose arrivals outran the
// slots backlogOutrun times: the head of the queue then refuses tasks
// that waited backlogWaits times the target (refusesBacklog).
type queueController struct {
	// auto: the target follows the latest latency target of the class's
	// arrivals (no ClassOptions.MaxQueueWait: autoQueueTarget), and only
	// arrivals with a target are shed. target is in ns; 0: off.
	auto   bool
	target int64
	mode   doorMode
	severe bool
	// The sums of the recent intervals, each weighted by
	// exp(-age/shedOnsetHorizon): offered work and what the slots could
	// do (ns), arrivals and completions.
	sumOffered, sumCapacity, sumArrivals, sumDone float64
	// calmArrivals, calmFor: the arrivals and time of the calm intervals
	// in a row while it sheds.
	calmArrivals uint64
	calmFor      int64
	// hold is the share of the held limit an auto-target class admits
	// up to while it sheds (0 stands for 1; holdShare); holdSeen,
	// holdFree: the arrivals since it last moved and those of them that
	// took a free slot at once.
	hold               float64
	holdSeen, holdFree uint64
	// holdLower, holdCapacity: the slot time less urgent classes on the
	// class's slots held since the hold last moved, and what the slots
	// could do meanwhile (ns).
	holdLower, holdCapacity float64
	// holdLowerWaiting: a less urgent class had tasks queued at the end
	// of one of the window's intervals.
	holdLowerWaiting bool
	// perDone is the class's slot time per completion over the intervals
	// whose queue stood above the target (ns, a 1/4 moving average; 0
	// before one), last moved at perDoneAt.
	perDone, perDoneAt int64
	iv                 tally
}

// doorMode is a queueController's state (its doc names each).
type doorMode uint8

const (
	calm doorMode = iota
	shedding
	overload
)

// tally is what happened to a class in the current interval.
type tally struct {
	start   int64 // ns, when it began
	minWait int64 // smallest queue wait granted, ns (math.MaxInt64: none)
	// admittedAt, completedAt, usedAt: the class's Admitted and
	// Completed counts and every class's charged slot time at start.
	admittedAt, completedAt uint64
	usedAt                  [NumClasses]int64
	grants                  uint64 // queued tasks granted a slot
	refused                 uint64 // arrivals and backlog refused for the queue
	offered                 int64  // the arrivals' expected work, ns
	arrivals                uint64 // admitted or refused
	guessed                 bool   // an arrival had no given run time
}

// reading is a class's counters at time t, read under the Granter's
// lock: what the controller is fed.
type reading struct {
	t                   int64
	admitted, completed uint64
	avgSlot             int64   // the class's average slot time, ns
	slots               float64 // the slots it can use (Granter.ServiceSlots)
	// spare is the share of the slots' time a CPU quota of fewer cores
	// than the slots leaves idle at no cost to the work done (Pacer.SetQuota;
	// 0: none): the kernel freezes the slots for it once the quota is spent.
	spare        float64
	used         [NumClasses]int64
	others       uint8 // classes on the same slots, itself excluded
	lower        uint8 // those of others less urgent than it
	lowerWaiting bool  // a less urgent class on its slots has tasks queued
}

const (
	// codelInterval is the shortest interval: CoDel's own.
	codelInterval = 100 * time.Millisecond
	// ewmaShift: the slot-time average moves 1/8 per measured task.
	ewmaShift = 3
	// standingShare: an auto target is at least 1/standingShare of the
	// time an arrival has left: a standing queue held at the latency
	// target itself serves its edge late whenever run times come out
	// above the average, and buys no more work.
	standingShare = 10
	// serviceQueue: an auto target is serviceQueue slot times of the
	// class, the wait of a bounded queue twice the slots deep (imgproxy's
	// 2x GOMAXPROCS).
	serviceQueue = 2
	// standingPeak: a shedding auto-target class refuses above
	// standingPeak times its target, so that the queue's trough, not
	// its peak, sits near the target, as CoDel's test holds it.
	standingPeak = 2
	// hold*: once holdArrivals arrivals have come since the hold last
	// moved, it is multiplied by holdDown if at most holdIdleLow of them
	// found a free slot (the slots never idled: the queue bought only
	// wait), by holdUp up to 1 if over holdIdleHigh did; never below
	// holdMin. By PASTA the share that found a slot free is the share
	// of time one idled. Under a CPU quota of fewer cores than the slots
	// (reading.spare) the slots may idle the quota's spare share of
	// each period and the quota is still used whole, the kernel
	// freezing them for the rest: that share of arrivals finding a slot
	// free counts as none. It is the least share of arrivals that find
	// one free while the slots idle that share of their time (all of it
	// at once); a queue held past it buys wait, not work.
	holdIdleLow  = 0.01
	holdIdleHigh = 0.03
	holdDown     = 0.7
	holdUp       = 1.5
	holdMin      = 1.0 / 64
	holdArrivals = 64
	// holdLowerShare: while less urgent classes hold more than this share
	// of the slot time, the class's arrivals count as finding a slot (it
	// takes theirs at their next release); a tight objective still wants
	// a short queue beside a trickle of batch.
	holdLowerShare = 0.25
	// holdEarly: the hold of an early onset, which outruns the slots
	// 1.5 times and is over before holdDown would bring a hold of 1 down.
	holdEarly = 0.25
	// shedCalmArrivals, shedCalmTime: one calm interval of a few
	// arrivals comes by chance in overload; 20 arrivals or a second of
	// them does not.
	shedCalmArrivals = 20
	shedCalmTime     = time.Second
	// shedOnsetHorizon, sustainedCount: one interval outruns the slots by
	// chance at 80 % of capacity; the recent intervals together, weighted
	// over about half a second, do not, and twice the capacity passes
	// within two intervals. Arrivals counted against completions must
	// outrun them sustainedCount times.
	shedOnsetHorizon = 500 * time.Millisecond
	sustainedCount   = 1.25
	// earlyOutrun: a burst at 80 % of capacity brings under 1.5 times the
	// slots' work over a quarter of an interval; twice the capacity
	// brings more.
	earlyOutrun = 1.5
	// backlogWaits, backlogOutrun: a class shedding while its arrivals
	// outrun the slots backlogOutrun times refuses at the head a task
	// that waited backlogWaits times the target: the backlog let in
	// before the onset, which would keep the served far above the target.
	backlogWaits  = 2
	backlogOutrun = 2
)

// autoQueueTarget is the queue-wait target of a class without
// ClassOptions.MaxQueueWait for an arrival with left ns to its due, its
// class's slot time being slot ns (0: not measured yet): serviceQueue
// slot times, but never under 1/standingShare of the time left (a class
// whose sizes differ widely would shed below capacity), and at most half
// of it.
func autoQueueTarget(left, slot int64) int64 {
	return min(max(serviceQueue*slot, left/standingShare), left/2)
}

// newQueueController is a calm controller with target ns (0: off, or
// auto once an arrival brings a latency target) whose first interval
// starts at start.
func newQueueController(target, start int64) queueController {
	return queueController{target: target, iv: tally{start: start, minWait: math.MaxInt64}}
}

// sheds reports whether the class refuses arrivals for its queue.
func (q *queueController) sheds() bool { return q.mode != calm }

// autoTarget sets an auto target for an arrival with left ns to its due
// (slot: the class's average slot time), unless a fixed one is set; it
// reports whether the target is now auto.
func (q *queueController) autoTarget(left, slot int64) bool {
	if q.target != 0 && !q.auto {
		return false
	}
	q.target, q.auto = autoQueueTarget(left, slot), true
	return true
}

// intervalLen is the interval for a class whose average slot time is
// slot ns: codelInterval, or two slot times if longer.
func intervalLen(slot int64) int64 { return max(int64(codelInterval), 2*slot) }

// holdShare is the hold, 1 for its zero value.
func (q *queueController) holdShare() float64 {
	if q.hold == 0 {
		return 1
	}
	return q.hold
}

// heldLimit is the mean estimated queue wait above which a shedding
// class refuses an arrival, ns.
func (q *queueController) heldLimit() int64 {
	if !q.auto {
		return q.target
	}
	return int64(float64(q.target*standingPeak) * q.holdShare())
}

// offer counts an arrival at the door bringing work ns (declared: its
// run time was given).
func (q *queueController) offer(work int64, declared bool) {
	q.iv.offered += work
	q.iv.arrivals++
	if !declared {
		q.iv.guessed = true
	}
}

// granted feeds the queue wait of a queued task granted a slot, ns.
func (q *queueController) granted(wait int64) {
	q.iv.minWait = min(q.iv.minWait, wait)
	q.iv.grants++
}

// refuses reports whether an arrival whose mean estimated queue wait is
// wait ns is refused for the queue (limit: heldLimit when it came, read
// before an early onset it started; spent: the class holds no queue;
// spared: its key is within its share); it counts the refusal.
func (q *queueController) refuses(wait, limit int64, spent, spared bool) bool {
	if !q.sheds() || spared || wait <= limit && !spent {
		return false
	}
	q.iv.refused++
	return true
}

// refusesBacklog reports whether a task at the head that has waited ns
// is backlog to refuse (spent: the class holds no queue); the Granter
// adds which tasks may be refused at all.
func (q *queueController) refusesBacklog(waited int64, spent bool) bool {
	limit := backlogWaits * q.target
	if spent {
		limit = 0 // what the door let in before it knew the budget spent
	}
	return (q.severe || spent) && waited > limit
}

// spent reports whether the class holds no queue because the CPU budget
// is spent (budgetSpent): an auto-target class in overload. When the
// quota, not the slots, bounds the work, a queued task only waits for
// CPU the period does not have; near capacity the held queue stays.
func (q *queueController) spent(budgetSpent bool) bool {
	return q.auto && q.mode == overload && budgetSpent
}

// outrun reports whether arrivals that brought offered ns of work
// (arrivals of them, against done completions) over a stretch in which
// the slots could do capacity ns outran the slots k times: in the
// stretch alone, and over the recent intervals together with it (their
// sums weighted by decay, the stretch's own at 1). When some arrivals
// came without a given run time, arrivals over completions count too,
// the recent ones against sustainedCount times k.
func (q *queueController) outrun(k, offered, capacity, arrivals, done, decay float64) (stretch, recent bool) {
	stretch = offered > k*capacity || q.iv.guessed && arrivals > k*done
	recent = q.sumOffered*decay+offered > k*(q.sumCapacity*decay+capacity) ||
		q.iv.guessed && q.sumArrivals*decay+arrivals > k*sustainedCount*(q.sumDone*decay+done)
	return stretch, recent
}

// atOnce is the interval's arrivals that took a free slot at once, by r:
// admissions beyond the queued grants (the lock-free path never feeds
// the controller itself).
func (q *queueController) atOnce(r *reading) uint64 {
	if n := r.admitted - q.iv.admittedAt; n > q.iv.grants {
		return n - q.iv.grants
	}
	return 0
}

// soFar is the current interval up to r.t: the work its arrivals brought
// (those that took a free slot at once at the class's average slot time),
// the arrivals, what the slots could do (ns), the completions, and the
// weight of the recent intervals' sums at r.t.
func (q *queueController) soFar(r *reading) (offered, arrivals, capacity, done, decay float64) {
	el := r.t - q.iv.start
	offered, arrivals = float64(q.iv.offered), float64(q.iv.arrivals)
	if n := q.atOnce(r); n > 0 {
		offered += float64(int64(n) * r.avgSlot)
		arrivals += float64(n)
	}
	capacity = float64(el) * r.slots
	done = float64(r.completed - q.iv.completedAt)
	decay = math.Exp(-float64(el) / float64(shedOnsetHorizon))
	return offered, arrivals, capacity, done, decay
}

// queuesUnjudged reports whether an arrival with a latency target queues
// without the door's estimate judging it: the class is calm, and its
// recent intervals' arrivals, the current interval's so far with them
// (r), brought no more work than the slots could do. The head judges
// such an arrival instead, with its wait known: it refuses one that can
// no longer finish (by a ctx deadline, or an objective past the late
// budget), and a ctx deadline takes it out of the queue by itself. Below
// capacity the door's estimate — a mean and a spread of run times not
// yet seen — refuses requests a queue would have served in time. Before
// the first interval has ended there is nothing recent to judge by:
// false.
func (q *queueController) queuesUnjudged(r reading) bool {
	if q.sheds() || q.sumCapacity == 0 {
		return false
	}
	offered, _, capacity, _, decay := q.soFar(&r)
	return q.sumOffered*decay+offered <= q.sumCapacity*decay+capacity
}

// earlyOnset starts the shedding before the interval ends when the
// interval so far (a quarter of it at least) and the recent intervals
// with it outran the slots earlyOutrun times; it reports whether it did.
func (q *queueController) earlyOnset(r reading) bool {
	if q.sheds() || r.t-q.iv.start < intervalLen(r.avgSlot)/4 {
		return false
	}
	offered, arrivals, capacity, done, decay := q.soFar(&r)
	if outrun, sustained := q.outrun(earlyOutrun, offered, capacity, arrivals, done, decay); !outrun || !sustained {
		return false
	}
	q.mode = overload
	q.calmArrivals, q.calmFor = 0, 0
	q.hold = holdEarly
	q.resetHoldWindow()
	return true
}

// due reports whether the interval has run its length by t, the class's
// average slot time being slot ns: endInterval is then due, with a
// reading at t. It reads no counter, so the Granter asks it first.
func (q *queueController) due(t, slot int64) bool { return t-q.iv.start >= intervalLen(slot) }

// endInterval ends the interval at r.t: the state for the next one,
// the hold, and the standing queue's slot time per completion. An
// interval without grants keeps the previous decision.
func (q *queueController) endInterval(r reading) {
	iv := &q.iv
	free := q.atOnce(&r)
	if free > 0 {
		iv.minWait = 0 // some took a free slot at once: the queue drained
		iv.offered += int64(free) * r.avgSlot
		iv.arrivals += free
	}
	length := r.t - iv.start
	capacity := float64(length) * r.slots
	done := r.completed - iv.completedAt
	decay := math.Exp(-float64(length) / float64(shedOnsetHorizon))
	offered, arrivals := float64(iv.offered), float64(iv.arrivals)
	outrun, sustained := q.outrun(1, offered, capacity, arrivals, float64(done), decay)
	severe, _ := q.outrun(backlogOutrun, offered, capacity, arrivals, float64(done), decay)
	clearNow, clearRecent := q.outrun(earlyOutrun, offered, capacity, arrivals, float64(done), decay)
	q.sumOffered = q.sumOffered*decay + offered
	q.sumCapacity = q.sumCapacity*decay + capacity
	q.sumArrivals = q.sumArrivals*decay + arrivals
	q.sumDone = q.sumDone*decay + float64(done)
	sheds := q.sheds()
	switch {
	case sheds:
		if iv.refused == 0 || !outrun {
			q.calmArrivals += iv.arrivals
			q.calmFor += length
		} else {
			q.calmArrivals, q.calmFor = 0, 0
		}
		sheds = q.calmArrivals < shedCalmArrivals && q.calmFor < int64(shedCalmTime)
		q.holdLowerWaiting = q.holdLowerWaiting || r.lowerWaiting
		q.moveHold(free, q.lowerHeld(r), capacity, r.spare)
	case iv.minWait != math.MaxInt64:
		// A queue standing while the arrivals fall behind the slots
		// drains by itself: shedding it refuses work done in time.
		sheds = iv.minWait > q.target && outrun && sustained
		q.calmArrivals, q.calmFor = 0, 0
		q.hold = 0
		q.resetHoldWindow()
	}
	switch {
	case !sheds:
		q.mode = calm
	case clearNow && clearRecent:
		q.mode = overload
	default:
		q.mode = shedding
	}
	q.severe = sheds && severe
	if iv.minWait != math.MaxInt64 && iv.minWait > q.target && done > 0 {
		// The queue stood above the target through the interval: every
		// slot the class could hold was busy.
		busy := capacity
		for k := range Class(NumClasses) {
			if r.others&(1<<k) != 0 {
				busy -= float64(r.used[k] - iv.usedAt[k])
			}
		}
		if x := int64(busy / float64(done)); x > 0 {
			if q.perDone == 0 {
				q.perDone = x
			} else {
				q.perDone += (x - q.perDone) / 4
			}
			q.perDoneAt = r.t
		}
	}
	q.iv = tally{start: r.t, minWait: math.MaxInt64, admittedAt: r.admitted, completedAt: r.completed, usedAt: r.used}
}

// lowerHeld is the slot time less urgent classes on the class's slots
// held in the interval ending at r, ns.
func (q *queueController) lowerHeld(r reading) float64 {
	var held int64
	for k := range Class(NumClasses) {
		if r.lower&(1<<k) != 0 {
			held += r.used[k] - q.iv.usedAt[k]
		}
	}
	return float64(held)
}

// moveHold feeds the hold an interval's arrivals, free of which took a
// free slot at once, and the slot time lower of capacity (ns) less
// urgent classes held. Once holdArrivals have come, it moves by the
// share that found a slot free, less spare (reading.spare, at the
// window's last interval) — or as if all had, when less urgent
// classes held over holdLowerShare of the slot time: the class takes
// their slots at their next release, so its queue did not only buy
// wait. It does not fall while a less urgent class waits: no slot ever
// idles then (that class takes each one the queue leaves), so no share
// of free slots can say the queue only bought wait.
func (q *queueController) moveHold(free uint64, lower, capacity, spare float64) {
	q.holdSeen += q.iv.arrivals
	q.holdFree += free
	q.holdLower += lower
	q.holdCapacity += capacity
	if q.holdSeen < holdArrivals {
		return
	}
	idle := max(0, float64(q.holdFree)/float64(q.holdSeen)-spare)
	if q.holdLower > holdLowerShare*q.holdCapacity {
		idle = 1
	}
	switch {
	case idle <= holdIdleLow && !q.holdLowerWaiting:
		q.hold = max(holdMin, q.holdShare()*holdDown)
	case idle > holdIdleHigh:
		q.hold = min(1, q.holdShare()*holdUp)
	}
	q.resetHoldWindow()
}

// resetHoldWindow starts the hold's next window of arrivals.
func (q *queueController) resetHoldWindow() {
	q.holdSeen, q.holdFree, q.holdLower, q.holdCapacity, q.holdLowerWaiting = 0, 0, 0, 0, false
}

// perCompletion is the standing queue's slot time per completion at t
// (intervalLen: the class's interval), ns, and whether one of the last
// two intervals stood to measure it.
func (q *queueController) perCompletion(t, intervalLen int64) (int64, bool) {
	if q.perDone == 0 || t-q.perDoneAt > 2*intervalLen {
		return 0, false
	}
	return q.perDone, true
}
