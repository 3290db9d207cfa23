package cpuwork

import (
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// granter owns the slots (CockroachDB's admission package is the model:
// its granter hands out slots, its requesters queue for them). It holds
// every piece of admission and ordering state — the free slots, the
// waiters and their per-class queues, the class shares and virtual clock,
// the late budget, the queue-wait controllers, the capacity (the
// fractional slot and the SpareP bound included) — and only its methods
// change it: acquire (tryAcquire, tryAcquireFor), the door
// (queueAdmitLocked), enqueue, pick, grant, one release and one
// setCapacity. The executor keeps the task lifecycle (Do, Go, Checkpoint,
// For) and wakes the waiters the granter granted.
//
// Locking: the hot fields are atomics read without the lock; everything
// else is guarded by mu. Methods named ...Locked expect mu held.
type granter struct {
	// Hot fields, each touched by the admission fast path.
	// free holds the free slots (negative while the slot count shrinks)
	// and the capacity in one word (slotWord): a release compares the
	// two at one instant.
	free     slotWord
	waiting  atomic.Int64  // queued waiters, all classes
	waitMask atomic.Uint32 // bit c set while class c has queued waiters
	// headDue[c] is the due of class c's first waiter (math.MaxInt64
	// when none), for Checkpoint's lock-free hand-over test (order.go).
	headDue [NumClasses]atomic.Int64
	_       [64]byte

	mu    sync.Mutex
	slots int // total slots; guarded by mu
	// nslots mirrors slots for readers that do not take mu (For).
	nslots atomic.Int64
	queues [NumClasses]waitQueue
	share  shares // weighted fair queuing of Interactive and Batch (order.go)
	limit  [NumClasses]int
	// latencyTarget is ClassOptions.LatencyTarget in ns (0: none).
	latencyTarget [NumClasses]int64
	shed          [NumClasses]shedState // queue-wait targets (shed.go)
	// lateShare[c] is the moving share of class c's queued objective
	// tasks let in though expected late, in 1/2^24 (order.go's late
	// budget).
	lateShare [NumClasses]int32
	// sinceBackground counts grants to other classes while Background
	// waits (the Background starvation guard, shed.go).
	sinceBackground int
	// lowCap bounds the slots Batch and Background hold together (0: no
	// bound; Options.Batch.SpareP); lowRunning counts those they hold.
	lowCap     atomic.Int64
	lowRunning atomic.Int64
	spareP     bool
	// extraClosed says the fractional quota's extra slot is closed now
	// (fraction.go).
	extraClosed bool

	// pending holds waiters granted under mu and not yet woken: they are
	// signalled after mu is released (unlockAndWake), which keeps channel
	// sends and goroutine wake-ups out of the critical section.
	pending []*waiter

	// closed is set by Close: the door refuses every submission.
	closed atomic.Bool
	// doubleReleases counts releases ignored because they would have
	// freed more slots than the capacity (the slots that may be held now:
	// slots, less the fractional slot while it is closed; release).
	doubleReleases atomic.Uint64
	// pacedCap is, while a fractional quota's extra slot is paced, the
	// slots that serve the queue on average (fracPacer.capacity: the
	// slots held while a task queued, 1.5 for 1.5 CPUs before it is
	// measured), in math.Float64bits; 0: not paced. The door divides
	// the work ahead by it, not by the slot count: the extra slot is
	// closed part of the time.
	pacedCap atomic.Uint64

	// stats is the executor's per-class counters: a grant counts the
	// admission, the door counts refusals. owner wakes what the granter
	// granted (Executor.wake).
	stats *[NumClasses]classStats
	owner *Executor
}

// init sets the per-class limits, targets and weights from the options;
// it is called by New before the granter is used.
func (g *granter) init(o Options, stats *[NumClasses]classStats, owner *Executor) error {
	g.stats, g.owner = stats, owner
	g.free.v.Store(freeBias) // no slot free, no capacity: setCapacityLocked gives both
	for c := range Class(NumClasses) {
		co := o.Classes[c]
		switch l := co.QueueLimit; {
		case l < 0:
			return fmt.Errorf("cpuwork: Options.Classes[%s].QueueLimit is %d, must be >= 0", c, l)
		case l == 0:
			g.limit[c] = DefaultQueueLimit
		default:
			g.limit[c] = l
		}
		if co.MaxQueueWait < 0 {
			return fmt.Errorf("cpuwork: Options.Classes[%s].MaxQueueWait is %v, must be >= 0", c, co.MaxQueueWait)
		}
		g.shed[c] = shedState{target: int64(co.MaxQueueWait), minWait: math.MaxInt64}
		g.headDue[c].Store(math.MaxInt64)
		if co.LatencyTarget < 0 {
			return fmt.Errorf("cpuwork: Options.Classes[%s].LatencyTarget is %v, must be >= 0", c, co.LatencyTarget)
		}
		g.latencyTarget[c] = int64(co.LatencyTarget)
		switch w := co.Weight; {
		case w < 0:
			return fmt.Errorf("cpuwork: Options.Classes[%s].Weight is %d, must be >= 0", c, w)
		case w > 0 && c != Interactive && c != Batch:
			return fmt.Errorf("cpuwork: Options.Classes[%s].Weight is %d: only Interactive and Batch take a weight", c, w)
		case w > 0:
			g.share.weight[c] = float64(w)
		default:
			g.share.weight[c] = defaultWeight[c]
		}
	}
	g.spareP = o.Batch.SpareP
	return nil
}

// lock and unlock take and release the granter's lock for a caller that
// calls several ...Locked methods as one step (a queued submission, a
// hand-over at a Checkpoint). The executor's worker pools are guarded by
// the same lock.
func (g *granter) lock()   { g.mu.Lock() }
func (g *granter) unlock() { g.mu.Unlock() }

// Lock-free reads for the fast paths.

// mask is the set of classes with queued waiters (bit c for class c).
func (g *granter) mask() uint32 { return g.waitMask.Load() }

// headDueOf is the due of class c's first waiter (math.MaxInt64: none).
func (g *granter) headDueOf(c Class) int64 { return g.headDue[c].Load() }

// hasWaiters reports whether any task is queued.
func (g *granter) hasWaiters() bool { return g.waiting.Load() != 0 }

// freeNow reports whether a slot is free and nobody is queued: a new
// task would take it at once.
func (g *granter) freeNow() bool { return g.free.freeSlots() > 0 && g.waiting.Load() == 0 }

// overCommitted reports whether more slots are held than the capacity
// allows (it shrank, or the fractional slot closed): a running task
// should hand its slot back.
func (g *granter) overCommitted() bool { return g.free.freeSlots() < 0 }

// occupied reports the slots held now (the capacity less the free count,
// so a task over the count while the extra slot is closed counts) and
// whether a task is queued: the fractional pacer's occupancy sample.
func (g *granter) occupied() (held int64, queued bool) {
	free, capacity := unpackSlots(g.free.v.Load())
	return capacity - free, g.waiting.Load() > 0
}

// isClosed reports whether the door is closed (Close).
func (g *granter) isClosed() bool { return g.closed.Load() }

// slotCount is the slot count without the lock.
func (g *granter) slotCount() int64 { return g.nslots.Load() }

// targetOf is class c's latency target in ns (0: none).
func (g *granter) targetOf(c Class) int64 { return g.latencyTarget[c] }

// recordSlot feeds a measured slot time d of class c into the shares.
func (g *granter) recordSlot(c Class, d int64) { g.share.lastSlot[c].Store(d) }

// release is the one path by which a slot held for class c goes back: a
// task finished, a task handed its slot over at a Checkpoint, a For helper
// stopped, a granted waiter was cancelled, an admission was undone by
// Close. It drops the class's in-flight slot-time estimate (*est) and its
// SpareP count, frees the slot and hands free slots to the waiters in
// policy order (order.go); a task granted to keep's pool goes into keep
// for the worker that is releasing to run next.
//
// A waiter increments waiting before it looks at free, and release adds to
// free before it looks at waiting, so (sequentially consistent atomics) one
// of the two always sees the other: no slot stays free while a task waits.
//
// A release that would leave more slots free than the capacity is a
// double release (a slot given back twice): it is undone, logged and
// counted in doubleReleases instead of letting one more task run than
// there are slots.
func (g *granter) release(c Class, est *int64, keep *keepNext) {
	if *est != 0 {
		g.share.inflight[c].Add(-*est)
		*est = 0
	}
	if c.runsOnWorker() {
		g.lowRunning.Add(-1)
	}
	f, capacity := g.free.add(1)
	if f > capacity {
		g.free.add(-1)
		g.doubleReleases.Add(1)
		g.owner.log.Error("cpuwork: internal error: a slot was released twice; the release is ignored", "class", c, "free", f-1, "capacity", capacity)
		return
	}
	if f > 0 && g.waiting.Load() > 0 {
		g.mu.Lock()
		g.dispatchLocked()
		g.unlockAndWakeKeep(keep)
	}
}

// setCapacityLocked is the one way the capacity changes: slots in total,
// of which one is held closed while the fractional quota's extra slot is
// (extraClosed). The difference goes to free (negative while running tasks
// exceed it: they hand their slots back at their next Checkpoint), the
// SpareP bound follows, and free slots go to the waiters.
func (g *granter) setCapacityLocked(slots int, extraClosed bool) {
	old := g.slots
	if g.extraClosed {
		old--
	}
	now := slots
	if extraClosed {
		now--
	}
	g.slots, g.extraClosed = slots, extraClosed
	g.nslots.Store(int64(slots))
	g.lowCap.Store(0)
	if g.spareP {
		g.lowCap.Store(int64(max(1, min(slots, runtime.GOMAXPROCS(0)-1))))
	}
	// One atomic step for both, so a release (which reads both without
	// the lock) never sees the new capacity beside the old free count.
	g.free.resize(int64(now), int64(now-old))
	g.dispatchLocked()
}

// setSlotsLocked sets the slot count (SetSlots, a budget change).
func (g *granter) setSlotsLocked(n int) { g.setCapacityLocked(n, g.extraClosed) }

// setExtraOpenLocked opens or closes the fractional quota's extra slot.
func (g *granter) setExtraOpenLocked(open bool) {
	if open == !g.extraClosed {
		return
	}
	g.setCapacityLocked(g.slots, !open)
}

// closeLocked closes the door: every later submission is refused with
// ErrClosed.
func (g *granter) closeLocked() { g.closed.Store(true) }

// drainLocked takes every waiter out of the queues (Close), in class
// order.
func (g *granter) drainLocked() []*waiter {
	var ws []*waiter
	for c := range g.queues {
		for w := g.queues[c].popFront(); w != nil; w = g.queues[c].popFront() {
			g.dequeuedLocked(Class(c))
			ws = append(ws, w)
		}
	}
	return ws
}

// snapshotLocked reads the slot count, the free slots, the door and the
// queue lengths for Stats.
func (g *granter) snapshotLocked() (slots, free int, closed bool, queued [NumClasses]int) {
	for c := range g.queues {
		queued[c] = g.queues[c].n
	}
	return g.slots, int(g.free.freeSlots()), g.closed.Load(), queued
}

// setPacedCapacity records the slots that serve the queue on average
// under a paced fractional quota (fracPacer.capacity; 0: none), for the
// door's estimate.
func (g *granter) setPacedCapacity(c float64) { g.pacedCap.Store(math.Float64bits(c)) }

// serviceSlots is what the door divides the work ahead by: the slots, or
// the paced quota's measured average when it is below them.
func (g *granter) serviceSlots() float64 {
	n := float64(max(g.slots, 1))
	if c := math.Float64frombits(g.pacedCap.Load()); c > 0 && c < n {
		return c
	}
	return n
}

// slotsLocked is the slot count.
func (g *granter) slotsLocked() int { return g.slots }

// tryAcquire takes a free slot if one is free and nobody is queued (queued
// tasks are served first; a fresh arrival does not overtake them).
func (g *granter) tryAcquire() bool {
	if g.waiting.Load() != 0 {
		return false
	}
	return g.free.take()
}

// tryAcquireFor is tryAcquire that respects the SpareP bound for Batch and
// Background and counts their slot in lowRunning (under the lock when the
// bound applies, so concurrent callers cannot both pass it).
func (g *granter) tryAcquireFor(c Class) bool {
	if !c.runsOnWorker() {
		return g.tryAcquire()
	}
	if g.lowCap.Load() == 0 {
		if !g.tryAcquire() {
			return false
		}
		g.lowRunning.Add(1)
		return true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if lc := g.lowCap.Load(); lc > 0 && g.lowRunning.Load() >= lc {
		return false
	}
	if !g.tryAcquire() {
		return false
	}
	g.lowRunning.Add(1)
	return true
}

// keepNext is where a worker whose task just ended takes the next task
// granted to its own pool, to run it itself: sending it to the pool's
// queue would wake another worker goroutine (ready, wakep: a thread wake
// and a spinning M) while this one parks: ~1.5 % of a 2-slot executor's
// perf samples with 2 ms tasks (chansend -> wakep -> futex wake, and the
// parked worker's stopm); CPU per round of the quota child 22.1-22.3 ->
// 21.9-22.1 ms (docs/architecture.md, "Where tasks run").
type keepNext struct {
	pool int
	task *Task
}

// dispatchLocked hands free slots to queued waiters in policy order.
func (g *granter) dispatchLocked() {
	for g.waiting.Load() > 0 {
		if !g.free.take() {
			return
		}
		w := g.pickLocked()
		if w == nil { // none eligible now (SpareP's slot with only Batch queued, say): keep the slot free
			g.free.add(1)
			return
		}
		g.grantLocked(w)
	}
}

// grantLocked gives a slot to w, just out of the queue: it counts the
// admission (a submission's first grant only) and queues w's wake-up.
func (g *granter) grantLocked(w *waiter) {
	w.granted, w.started = true, true
	s := &g.stats[w.class]
	first := !w.requeued && w.kind != waitHelper
	if first {
		s.admitted.Add(1) // before the controller reads it (codelTickLocked)
	}
	if first && g.shed[w.class].target > 0 {
		t := now()
		g.codelGrantLocked(w.class, t-w.enq, t)
	}
	if w.class.runsOnWorker() {
		g.lowRunning.Add(1)
	}
	// The grant's expected slot time: what the waiter was queued with
	// (its given run time or its class's average), else the class's last
	// measured slot time, else 1 ms. It counts in its class's virtual time
	// and in the running work the door's estimate sees until released.
	est := w.work
	if est <= 0 {
		est = g.share.lastSlot[w.class].Load()
	}
	if est <= 0 {
		est = int64(time.Millisecond)
	}
	w.est = est
	g.share.inflight[w.class].Add(est)
	g.pending = append(g.pending, w)
}

// unlockAndWake releases mu, then has the executor wake the waiters
// granted or refused while it was held (Executor.wake).
func (g *granter) unlockAndWake() { g.unlockAndWakeKeep(nil) }

// unlockAndWakeKeep is unlockAndWake that puts the first task granted to
// keep's pool into keep (when keep is not nil) instead of sending it.
func (g *granter) unlockAndWakeKeep(keep *keepNext) {
	if len(g.pending) == 0 {
		g.mu.Unlock()
		return
	}
	var buf [8]*waiter
	ws := append(buf[:0], g.pending...)
	clear(g.pending)
	g.pending = g.pending[:0]
	g.mu.Unlock()
	g.owner.wake(ws, keep)
}

// wake wakes waiters the granter granted or refused: a blocked caller or
// helper through its ready channel, a task by sending it to the workers
// (granted) or failing it (refused).
func (e *Executor) wake(ws []*waiter, keep *keepNext) {
	failed := false
	for _, w := range ws {
		switch {
		case w.kind == waitTask && !w.requeued && w.refused != nil:
			t := w.task
			if t.stop != nil {
				t.stop()
			}
			t.err = w.refused
			close(t.done)
			failed = true
		case w.kind == waitTask && !w.requeued:
			if keep != nil && keep.task == nil && keep.pool == w.class.pool() {
				keep.task = w.task
				continue
			}
			e.pools[w.class.pool()].runq <- w.task
		default:
			w.ready <- struct{}{}
		}
	}
	if failed {
		e.checkDrained()
	}
}

// slotWord packs the free slot count and the capacity into one atomic
// word: the capacity in the high 32 bits, the free count in the low 32
// bits biased by 2^31 so that it may go negative (a shrink below the
// slots held) and an add never carries into the capacity. Reading both
// at one instant is what lets release tell a double release from a
// release that raced a shrink: with two words a shrink between a
// release's add and its read of the capacity made a correct release look
// like a double one, and undoing it lost the slot for good.
type slotWord struct{ v atomic.Uint64 }

const freeBias = 1 << 31

func unpackSlots(v uint64) (free, capacity int64) {
	return int64(uint32(v)) - freeBias, int64(v >> 32)
}

// freeSlots is the free count.
func (s *slotWord) freeSlots() int64 { f, _ := unpackSlots(s.v.Load()); return f }

// add adds d to the free count and returns the free count and the
// capacity just after.
func (s *slotWord) add(d int64) (free, capacity int64) {
	return unpackSlots(s.v.Add(uint64(d)))
}

// take takes a free slot if the free count is positive.
func (s *slotWord) take() bool {
	for {
		v := s.v.Load()
		if f, _ := unpackSlots(v); f <= 0 {
			return false
		}
		if s.v.CompareAndSwap(v, v-1) {
			return true
		}
	}
}

// resize sets the capacity and adds d to the free count in one step.
func (s *slotWord) resize(capacity, d int64) {
	for {
		v := s.v.Load()
		f, _ := unpackSlots(v)
		if s.v.CompareAndSwap(v, uint64(capacity)<<32|uint64(uint32(f+d+freeBias))) {
			return
		}
	}
}
