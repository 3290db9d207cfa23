package cpuwork

import (
	"fmt"
	"math"
	"runtime"
	"runtime/metrics"
	"time"

	"github.com/cpuwork/cpuwork/account"
)

// begin starts accounting a task of class c that got its slot now (t)
// after arriving at arrival, and returns its account (its Checkpoints
// read it; end takes it).
func (a *accountant) begin(c Class, arrival, t int64) *taskAccount {
	ta := &taskAccount{arrival: arrival, start: t, queueWait: t - arrival, acct: a}
	ta.pauses = []metrics.Sample{{Name: gcPausesName}}
	metrics.Read(ta.pauses)
	ta.gc0 = histSum(ta.pauses[0].Value)
	ta.nrThrottled, ta.haveThrottled = a.throttled()
	// The accounted task's goroutine keeps its thread until it ends, so
	// the thread's schedstat is the task's own: no other goroutine runs on
	// it, and the runtime cannot move it mid-stretch. (LockOSThread nests:
	// a task that locked its thread stays locked.)
	runtime.LockOSThread()
	ta.begin()
	return ta
}

// gapKind says what an accounted task waits for until its next reading.
type gapKind uint8

const (
	gapNone  gapKind = iota // running: idle time is other (preempted, blocked)
	gapGo                   // yielded its P (Gosched): idle time is Go run queue
	gapQueue                // handed its slot over: idle time is queue wait
)

// pause reads an accounted task's thread before it yields its P (gapGo)
// or its slot (gapQueue), and unlocks its goroutine from the thread for
// the wait: a locked goroutine that yields costs two thread hand-offs of
// its P (stoplockedm/startlockedm in runtime/proc.go), which delayed the
// timers of that P. The caller reads it again with resume once it runs
// again, on whatever thread. Both do nothing on a nil taskAccount (the
// task is not accounted).
func (ta *taskAccount) pause(kind gapKind) {
	if ta == nil {
		return
	}
	ta.check()
	ta.gap, ta.pauseT = kind, now()
	runtime.UnlockOSThread()
}

// resume locks the task's goroutine to its (possibly new) thread again
// and reads it: on the same thread, what the thread did not spend running
// or runnable since the pause was the wait (add); on another, the wait is
// the wall time since the pause, and a new stretch begins.
func (ta *taskAccount) resume() {
	if ta == nil {
		return
	}
	runtime.LockOSThread()
	r := readThread()
	switch {
	case !r.ok || !ta.seg.ok:
	case r.tid == ta.seg.tid:
		ta.add(ta.last, r)
	default:
		wait := max(r.t-ta.pauseT, 0)
		switch {
		case ta.gap == gapQueue:
			ta.queueWait += wait
		case ta.throttledSince():
			ta.thrIdle += wait
		default:
			ta.goQueue += wait
		}
		ta.seg = r
	}
	ta.last, ta.lastT = r, now()
	ta.gap = gapNone
}

// throttledSince reports whether the cgroup's throttle count grew since
// the task last read it (and reads it).
func (ta *taskAccount) throttledSince() bool {
	if !ta.haveThrottled {
		return false
	}
	n, ok := ta.acct.throttled()
	if !ok {
		return false
	}
	grew := n > ta.nrThrottled
	ta.nrThrottled = n
	return grew
}

// begin starts a stretch on the calling thread.
func (ta *taskAccount) begin() {
	ta.seg = readThread()
	ta.last, ta.lastT = ta.seg, now()
}

// check is called at the accounted task's Checkpoint clock reads: it
// reads its thread again, and when the goroutine was moved to another
// thread (the runtime preempts a goroutine that ran 10 ms, forcePreemptNS
// in runtime/proc.go) it closes the stretch at its last reading on the
// old thread and begins one on the new: only the time since that last
// reading (one Checkpoint interval) is lost to other.
func (ta *taskAccount) check() {
	r := readThread()
	switch {
	case !r.ok || !ta.seg.ok:
		return
	case r.tid == ta.seg.tid:
		ta.add(ta.last, r)
		ta.last, ta.lastT = r, now()
	default:
		ta.moves++
		t := now()
		ta.lost += t - ta.lastT
		ta.seg, ta.last, ta.lastT = r, r, t
	}
}

// add counts a stretch's reading from..to; a run delay of at least
// throttleGap between them is throttling if the cgroup was throttled
// meanwhile.
func (ta *taskAccount) add(from, to threadStretch) {
	cpu := max(to.cpu-from.cpu, 0)
	d := max(to.delay-from.delay, 0)
	idle := max(to.t-from.t-cpu-d, 0)
	ta.onCPU += cpu
	ta.delay += d
	if ta.gap == gapQueue { // waiting for a slot: not runnable, whatever the cgroup did
		ta.queueWait += idle
		return
	}
	if (d >= throttleGap || idle >= throttleGap) && ta.throttledSince() {
		ta.thrDelay += d
		ta.thrIdle += idle
		return
	}
	if ta.gap == gapGo {
		ta.goQueue += idle
	}
}

// throttleGap is the run delay between two readings from which the
// cgroup's throttle count is read to tell throttling from competition.
const throttleGap = int64(time.Millisecond)

func (ta *taskAccount) endStretch() {
	end := readThread()
	switch {
	case !ta.seg.ok || !end.ok:
		ta.partial = "the thread's schedstat could not be read"
	case end.tid != ta.seg.tid:
		ta.moves++
		ta.lost += now() - ta.lastT
	default:
		ta.add(ta.last, end)
	}
	ta.seg.ok = false
}

// end finishes the account ta of a task of class c at t, after its slot
// was released (nil: nothing).
func (a *accountant) end(ta *taskAccount, c Class, t int64) {
	if ta == nil {
		return
	}
	defer runtime.UnlockOSThread()
	if ta.seg.ok {
		ta.endStretch()
	}
	metrics.Read(ta.pauses)
	gc := int64((histSum(ta.pauses[0].Value) - ta.gc0) * 1e9)
	thrDelay := min(ta.thrDelay, ta.delay)
	if ta.partial == "" && ta.lost*20 > t-ta.start {
		ta.partial = fmt.Sprintf("the goroutine moved threads %d times; %v between a thread's last reading and the move (over 5 %% of the run) is in other",
			ta.moves, time.Duration(ta.lost).Round(time.Microsecond))
	}
	acc := account.Task{Class: c.String(), End: time.Now(), Wall: time.Duration(t - ta.arrival), Run: time.Duration(t - ta.start), Partial: ta.partial}
	// Each part takes what it measured, up to what is left of the wall
	// time: the parts sum to Wall and other is what nothing explains.
	left := t - ta.arrival
	take := func(p account.Part, v int64) {
		v = min(max(v, 0), left)
		acc.Parts[p] = time.Duration(v)
		left -= v
	}
	take(account.QueueWait, ta.queueWait)
	take(account.OnCPU, ta.onCPU)
	take(account.Throttled, thrDelay+ta.thrIdle)
	take(account.KernelRunQueue, ta.delay-thrDelay)
	take(account.GoRunQueue, ta.goQueue)
	take(account.GC, gc)
	acc.Parts[account.Other] = time.Duration(left)
	a.record(c, acc)
	if a.onTask != nil {
		a.onTask(acc)
	}
}

// record adds acc to class c's part distributions and the slowest.
func (a *accountant) record(c Class, acc account.Task) {
	hp := a.partHist[c].Load()
	if hp == nil {
		a.partHist[c].CompareAndSwap(nil, new([account.NumParts]histogram))
		hp = a.partHist[c].Load()
	}
	for p := range account.NumParts {
		hp[p].record(int64(acc.Parts[p]), 1)
	}
	a.slowest.add(acc, now())
}

// gcPausesName is the runtime/metrics histogram of stop-the-world pauses
// for garbage collection (Go >= 1.22).
const gcPausesName = "/sched/pauses/total/gc:seconds"

// histSum estimates the sum of a runtime/metrics time histogram in
// seconds from its bucket counts (each at its bucket's midpoint; the open
// ends at their finite bound). 0 for a missing metric.
func histSum(v metrics.Value) float64 {
	if v.Kind() != metrics.KindFloat64Histogram {
		return 0
	}
	h := v.Float64Histogram()
	var s float64
	for i, n := range h.Counts {
		if n == 0 {
			continue
		}
		lo, hi := h.Buckets[i], h.Buckets[i+1]
		switch {
		case math.IsInf(lo, -1):
			lo = hi
		case math.IsInf(hi, 1):
			hi = lo
		}
		s += float64(n) * (lo + hi) / 2
	}
	return s
}
