// Package admission is the executor's admission core: the slots, the
// door that refuses what would be late or stand too long (door.go), the
// order in which queued tasks get a slot (order.go) and the Granter
// that owns them all behind one protocol (granter.go). It never imports
// the executor; the executor reaches it only through the Granter's
// methods, and it reaches the executor only through an Owner.
package admission

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// Granter owns the slots (CockroachDB's admission package is the model:
// its Granter hands out slots, its requesters queue for them). It holds
// every piece of admission and ordering state — the free slots, the
// waiters and their per-class queues, the class shares and virtual clock,
// the estimators the door and the ordering read, the late budget, the
// queue-wait controllers, the capacity (the fractional slot and the
// SpareP bound included) — and its lock, which only its own methods take.
//
// The protocol the executor calls, and nothing else:
//
//   - Init: the classes, the counters, the Owner;
//   - TryAcquire: a free slot at once, lock-free;
//   - Admit: the door, the queue, a grant and, for a blocked caller, the
//     wait with its cancellation race (a Go task is woken by Owner.Wake);
//   - Requeue: queue again a task that gives its slot up at a Checkpoint
//     (a hand-over, or a park), or a For helper that waits for one;
//     Await: their wait;
//   - Withdraw: a queued Go task whose ctx ended leaves the queue;
//   - Record: a measured slot period feeds the estimators (and, the
//     task's last, ends its key's charge);
//   - Release: the one way a slot goes back; Undo: the one way an
//     admission is taken back;
//   - SetCapacity (setCapacityLocked): the one way the slot count
//     changes; the fractional pacer's extra slot and what it tells the
//     door go through its own seam, Pacer;
//   - Allow: the door alone, for a caller that runs its work itself;
//   - Close: the door closes, and the queues drain;
//   - Snapshot: the state at one instant, for Stats.
//
// Beside them, lock-free reads the hot paths need: Waiting and Behind (a
// Checkpoint's question), Rank, OverCommitted, Closed, Slots; and Quiet
// (Close's wait for the end). A Waiter's fields are the core's: the
// executor sets what the constructors and setters in waiter.go allow.
//
// It reaches the executor only through Owner (wake what it granted or
// refused; after a release or a cancellation, let it check whether Close
// may finish and step the fractional pacer) and reads the clock only
// through now (the seam a virtual clock replaces).
//
// Locking: the hot fields are atomics read without the lock; everything
// else is guarded by mu. Methods named ...Locked expect mu held.
type Granter struct {
	// Read-mostly: set by Init, or rarely (Close, a capacity change),
	// and read by every task. No field written per task shares their
	// cache lines.
	_ [64]byte
	// cnt[c] is class c's admission Counters and estimators, which the
	// executor's statistics read (classStats embeds them).
	cnt   [NumClasses]*Counters
	owner Owner
	// clock is the time source in now() nanoseconds (nil: Now).
	clock func() int64
	// latencyTarget is ClassOptions.LatencyTarget in ns (0: none).
	latencyTarget [NumClasses]int64
	// urgent[c] is the waitMask bits of the classes c yields to (Urgent).
	urgent [NumClasses]uint32
	// closed is set by Close: the door refuses every submission.
	closed atomic.Bool
	// lowCap bounds the slots Batch and Background hold together (0: no
	// bound; Options.Batch.SpareP, Options.Batch.Beside); highCap the
	// slots Critical and Interactive hold together (0: no bound; Beside).
	lowCap, highCap atomic.Int64
	_               [64]byte

	// Hot fields, each touched by the admission fast path.
	// free holds the free slots (negative while the slot count shrinks)
	// and the capacity in one word (slotWord): a release compares the
	// two at one instant.
	free slotWord
	// waitMask has bit c set while class c has queued waiters; it is
	// non-zero exactly while any task waits.
	waitMask atomic.Uint32
	// woken counts the waiters granted a slot and signalled that have not
	// yet returned from Await: their goroutines are runnable, most often
	// next on the P of the task that released the slot.
	woken atomic.Int64
	// dispatchWanted: a release freed a slot while a task waited and
	// found mu held; the holder dispatches before it lets mu go.
	dispatchWanted atomic.Bool
	// clocked counts the queued waiters whose pick reads the time (a
	// latency target, or Background's starvation guard); shedOn has bit c
	// set while class c has a queue-wait target (its grants feed the
	// controller the time). A dispatch reads the clock before it takes
	// mu only while either is set (clockFor).
	clocked atomic.Int64
	shedOn  atomic.Uint32
	// sheddingMask has bit c set while class c sheds in a clear overload
	// (markShedLocked);
	// budgetSpent: the CPU budget is spent for now (SetBudgetSpent).
	sheddingMask atomic.Uint32
	budgetSpent  atomic.Bool
	// quotaCores is the CPU quota's cores while the kernel, not the
	// pacer, bounds a fractional quota's work (SetQuota), in
	// math.Float64bits; 0: none, or paced.
	quotaCores atomic.Uint64
	// headDue[c] is the due of class c's first Waiter (math.MaxInt64
	// when none), for Checkpoint's lock-free hand-over test (order.go).
	headDue [NumClasses]atomic.Int64
	_       [64]byte
	// lowRunning counts the slots Batch and Background hold; highRunning
	// those Critical and Interactive hold, counted only while highCap is
	// set (beside).
	lowRunning, highRunning atomic.Int64
	_                       [48]byte

	mu    sync.Mutex
	slots int // total slots; guarded by mu
	// nslots mirrors slots for readers that do not take mu (For).
	nslots atomic.Int64
	queues [NumClasses]waitQueue
	share  shares               // weighted fair queuing of Interactive and Batch (order.go)
	keys   [NumClasses]keyTable // fair shares across keys inside a class (keys.go)
	limit  [NumClasses]int
	shed   [NumClasses]queueController // queue-wait controllers (controller.go)
	// lateShare[c] is the moving share of class c's queued objective
	// tasks let in though expected late, in 1/2^24 (door.go's late
	// budget).
	lateShare [NumClasses]int32
	// sinceBackground counts grants to other classes while Background
	// waits (the Background starvation guard, door.go).
	sinceBackground int
	spareP          bool
	// beside: Batch and Background run on slots of their own beside the
	// budget's (Config.Beside): the capacity is twice the slots, each
	// side bounded to the slots (lowCap, highCap).
	beside bool
	// extraClosed says the fractional quota's extra slot is closed now
	// (internal/pacer).
	extraClosed bool

	// pending holds waiters granted under mu and not yet woken: they are
	// signalled after mu is released (unlockAndWake), which keeps channel
	// sends and goroutine wake-ups out of the critical section.
	pending []*Waiter

	// doubleReleases counts releases ignored because they would have
	// freed more slots than the capacity (the slots that may be held now:
	// slots, less the fractional slot while it is closed; release).
	doubleReleases atomic.Uint64
	// pacedCap is, while a fractional quota's extra slot is paced, the
	// slots that serve the queue on average (pacer.Pacer.Capacity: the
	// slots held while a task queued, 1.5 for 1.5 CPUs before it is
	// measured), in math.Float64bits; 0: not paced. The door divides
	// the work ahead by it, not by the slot count: the extra slot is
	// closed part of the time.
	pacedCap atomic.Uint64
	// objective is the tightest latency objective of the tasks queued in
	// each of two windows (ns; 0: none), objectiveWin the current one's
	// number (Objective).
	objective    [2]atomic.Int64
	objectiveWin atomic.Int64
	log          *slog.Logger
}

// Sharded is a counter spread over cache lines: an increment goes to the
// shard of its key (a goroutine's or a task's identity), so tasks on
// different cores rarely write the same line; a read sums the shards.
// A reader that sums Completed before Admitted sees Admitted >= Completed
// for every task it counted, as with one counter.
type Sharded struct {
	s [shardCount]struct {
		n atomic.Uint64
		_ [56]byte
	}
}

const shardBits = 5 // 32 shards

const shardCount = 1 << shardBits

// shardOf is key's shard: Fibonacci hashing spreads nearby addresses.
func shardOf(key uintptr) int { return int(uint64(key) * 0x9E3779B97F4A7C15 >> (64 - shardBits)) }

// Inc adds 1 in key's shard and returns the shard's count after it and
// the shard.
func (c *Sharded) Inc(key uintptr) (n uint64, shard int) {
	k := shardOf(key)
	return c.s[k].n.Add(1), k
}

// Dec subtracts 1 in key's shard (undoing an Inc with the same key, or
// any other: only the sum counts).
func (c *Sharded) Dec(key uintptr) { c.s[shardOf(key)].n.Add(^uint64(0)) }

// Load is the sum of the shards.
func (c *Sharded) Load() uint64 {
	var n uint64
	for i := range c.s {
		n += c.s[i].n.Load()
	}
	return n
}

// Owner is what the Granter calls back: the executor.
type Owner interface {
	// Wake wakes a KindTask waiter granted or refused under the lock,
	// after it is released: it runs or fails its task, or resumes one
	// re-queued at a Checkpoint. The Granter wakes KindCaller and
	// KindHelper waiters itself, through their Ready channel. keep (nil,
	// or a pool with no task yet) takes the first task granted to its
	// pool instead of sending it.
	Wake(w *Waiter, keep *Keep)
	// Released follows every release and every cancellation of a queued
	// waiter: the executor may have drained (Close) or its pacer may
	// need to step.
	Released()
}

// Counters are one class's admission counts and the estimators the door
// and the ordering read; the executor's Stats reads them. The Granter
// writes them for what it decides: its door and queue limit, its grants,
// its refusals at the head, withdrawals and Undo. The executor writes
// Completed, Admitted on the lock-free path, and Rejected or Canceled
// for a submission it turns away before the Granter sees it (after
// Close, a done ctx, TryGo with no free slot, a queued Go task Close
// fails).
type Counters struct {
	// Admitted counts the tasks that got a slot (fast path, or granted
	// from the queue), Completed those that finished running (any
	// outcome): every task writes both, so they are spread over cache
	// lines (Sharded).
	Admitted  Sharded
	Completed Sharded
	Rejected  atomic.Uint64 // ErrSaturated or ErrClosed
	Canceled  atomic.Uint64 // ctx ended before the task got a slot
	Shed      atomic.Uint64 // refused at the door: deadline or queue-wait target (also in rejected)
	Late      atomic.Uint64 // let in though expected to miss its objective (the late budget, door.go)
	AvgSlotNs atomic.Int64  // moving average of measured slot times, ns (door.go)
	// DevSlotNs is the moving average of how far a measured slot time
	// fell from what was expected of it (its given run time, else avgSlotNs
	// before it), ns: the door's estimate error (door.go, doorSpread).
	DevSlotNs atomic.Int64
	// MedSlotNs tracks the median of measured slot times, ns: moved a
	// sixteenth of itself toward each sample. The door judges an
	// arrival's own run time, when it gave none, by it (Granter.ownRun).
	MedSlotNs atomic.Int64
	// DeclAvgNs and RunAvgNs are moving averages, over the queued tasks
	// that gave a run time (Target.Service) and ran in one slot period,
	// of that run time and of the slot time they took: their ratio
	// scales a given run time to what the slots really deliver
	// (Granter.scaledService).
	DeclAvgNs, RunAvgNs atomic.Int64
	Used                atomic.Int64 // slot time charged, ns (weighted by sampling)
}

// epoch anchors Now; time.Since on a monotonic reading costs one clock
// read, half of time.Now.
var epoch = time.Now()

// Now is the executor's clock: nanoseconds since the process began,
// monotonic.
func Now() int64 { return int64(time.Since(epoch)) }

// now is the Granter's clock.
func (g *Granter) now() int64 {
	if g.clock != nil {
		return g.clock()
	}
	return Now()
}

// Config configures a Granter (Init).
type Config struct {
	// Classes are the classes' options, as the executor's Options give
	// them (a QueueLimit of 0 is DefaultQueueLimit).
	Classes           [NumClasses]ClassConfig
	DefaultQueueLimit int
	// SpareP bounds the slots Batch and Background hold together to
	// GOMAXPROCS-1 (at least 1).
	SpareP bool
	// Beside gives Batch and Background slots of their own beside the
	// slots SetCapacity sets, as many: Critical and Interactive hold at
	// most those, batch at most its own.
	Beside bool
	// Counters[c] are class c's counters, which the Granter writes and
	// the executor reads; none may be nil.
	Counters [NumClasses]*Counters
	Owner    Owner
	Log      *slog.Logger // where a double release is reported; not nil
	// Clock is the time source in Now's nanoseconds (nil: Now): a
	// virtual clock for a simulation or a test.
	Clock func() int64
}

// ClassConfig is one class's options (the executor's ClassOptions).
type ClassConfig struct {
	QueueLimit    int
	LatencyTarget time.Duration
	MaxQueueWait  time.Duration
	Weight        int
}

// Init sets the per-class limits, targets and weights from cfg, with
// no slot yet (SetCapacity gives them); it is called before the Granter is
// used. Invalid options return an error naming the executor's option.
func (g *Granter) Init(cfg Config) error {
	g.cnt, g.owner, g.log, g.clock = cfg.Counters, cfg.Owner, cfg.Log, cfg.Clock
	made := g.now()          // every class's first shedding interval starts here
	g.free.v.Store(freeBias) // no slot free, no capacity: setCapacityLocked gives both
	for c := range Class(NumClasses) {
		co := cfg.Classes[c]
		switch l := co.QueueLimit; {
		case l < 0:
			return fmt.Errorf("cpuwork: Options.Classes[%s].QueueLimit is %d, must be >= 0", c, l)
		case l == 0:
			g.limit[c] = cfg.DefaultQueueLimit
		default:
			g.limit[c] = l
		}
		if co.MaxQueueWait < 0 {
			return fmt.Errorf("cpuwork: Options.Classes[%s].MaxQueueWait is %v, must be >= 0", c, co.MaxQueueWait)
		}
		g.shed[c] = newQueueController(int64(co.MaxQueueWait), made)
		if co.MaxQueueWait > 0 {
			g.shedOn.Or(1 << c)
		}
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
	g.spareP, g.beside = cfg.SpareP, cfg.Beside
	for c := range Class(NumClasses) {
		for k := range Class(NumClasses) {
			if MoreUrgent[c]&(1<<k) != 0 && g.sameSide(c, k) {
				g.urgent[c] |= 1 << k
			}
		}
	}
	return nil
}

// Lock-free reads for the fast paths.

// Waiting reports whether any task is queued.
func (g *Granter) Waiting() bool { return g.waitMask.Load() != 0 }

// freeNow reports whether a slot is free for a task of class c and nobody
// queued is ahead of it (waitersAhead): it would take the slot at once.
func (g *Granter) freeNow(c Class) bool {
	if c.RunsOnWorker() {
		return g.free.freeSlots() > 0 && g.waitMask.Load() == 0
	}
	if hc := g.highCap.Load(); hc != 0 && g.highRunning.Load() >= hc {
		return false
	}
	return g.free.freeSlots() > 0 && !g.waitersAhead()
}

// waitersAhead reports whether a queued task must get a free slot before
// a fresh Critical or Interactive arrival takes it. Queued Critical and
// Interactive tasks always must. Queued Batch and Background tasks must
// only where they could take it: not beside the budget (Beside: their
// slots are their side's, and the free slots the budget's side's), nor
// when they already hold all SpareP lets them. An arrival sent to the
// queue behind tasks that cannot run is judged by the door while a slot
// stands free for it.
func (g *Granter) waitersAhead() bool {
	m := g.waitMask.Load()
	switch {
	case m == 0:
		return false
	case m&(1<<Critical|1<<Interactive) != 0, !g.beside && g.lowCap.Load() == 0:
		return true
	case g.beside:
		return false
	}
	return g.lowRunning.Load() < g.lowCap.Load()
}

// OverCommitted reports whether more slots are held than the capacity
// allows (it shrank, or the fractional slot closed): a running task
// should hand its slot back.
func (g *Granter) OverCommitted() bool { return g.free.freeSlots() < 0 }

// Closed reports whether the door is closed (Close).
func (g *Granter) Closed() bool { return g.closed.Load() }

// Slots is the slot count without the lock.
func (g *Granter) Slots() int64 { return g.nslots.Load() }

// Admit is the one way a submission that found no free slot queues:
// the door (queueAdmitLocked: it may refuse w, with the error to return),
// its class queue at its due's place, the grant of any slot free now and,
// for a blocked caller (KindCaller), the wait for its slot (Await: a
// grant, a refusal at the head, Close, or ctx's end racing a grant). A
// task (KindTask) returns once queued; Owner.Wake runs or fails it,
// Withdraw takes it out when its ctx ends. Admit sets w's arrival and due
// and makes a caller's wake-up channel. Before it queues,
// it yields the P while a task granted a slot has not started yet.
func (g *Granter) Admit(ctx context.Context, w *Waiter) error {
	if w.kind != KindTask {
		w.makeReady()
	}
	w.enq = g.now()
	t := w.enq
	if g.woken.Load() > 0 {
		// A task granted a slot has not started yet: most often it is
		// the next to run on this P, behind this goroutine, which is
		// about to queue and park anyway. Let it run first, so that its
		// slot does not idle through this submission. The submission
		// keeps its arrival; the door judges the queue as it is after.
		runtime.Gosched()
		t = g.now()
	}
	g.setDue(ctx, w, w.enq)
	key, keyed := KeyOf(ctx)
	g.lock()
	g.keyRankLocked(key, keyed, w, t)
	if err := g.queueAdmitLocked(ctx, w, t, false); err != nil {
		keyRefused(w)
		keyUnrank(w)
		g.unlock()
		return err
	}
	g.keyChargeLocked(w, t)
	g.enqueueLocked(w)
	g.dispatchLocked(&t)
	g.unlockAndWake(nil)
	if w.kind == KindTask {
		return nil
	}
	switch r := g.Await(ctx.Done(), w); r {
	case WaitGranted:
		return nil
	case WaitCanceled:
		return ctx.Err()
	default:
		return r.err(w)
	}
}

// WaitResult is how a wait for a slot ended (Await).
type WaitResult uint8

const (
	WaitGranted  WaitResult = iota
	WaitCanceled            // done fired while queued (a slot granted meanwhile went back)
	WaitClosed              // Close failed the queue
	WaitRefused             // refused at the head: w.refused says why
)

// err is the error a submission returns for a wait that ended without a
// slot, other than a cancellation.
func (r WaitResult) err(w *Waiter) error {
	if r == WaitRefused {
		err := w.refused
		w.refused = nil
		return err
	}
	return ErrClosed
}

// Await blocks until w, queued, is granted a slot, is refused at the
// head of its queue, is failed by Close, or done is closed while it is
// still queued (a slot granted at that moment goes back through release).
// It counts what a submission's wait ends in — a cancellation, and a
// closed-out one as rejected (a refusal was counted when refused) — and
// nothing for a task queued again at a Checkpoint or a For helper. Once
// it returns, w is no longer Requeued.
func (g *Granter) Await(done <-chan struct{}, w *Waiter) WaitResult {
	r := g.await(done, w)
	w.requeued = false
	return r
}

func (g *Granter) await(done <-chan struct{}, w *Waiter) WaitResult {
	c := w.class
	submission := !w.requeued && w.kind != KindHelper
	if done == nil { // a wait that never ends early: a plain receive
		<-w.ready
	} else {
		select {
		case <-w.ready:
		case <-done:
			g.lock()
			if w.queued {
				g.removeLocked(w)
				g.unlock()
				if submission {
					g.cnt[c].Canceled.Add(1)
					g.keyDone(w)
				}
				g.owner.Released()
				return WaitCanceled
			}
			g.unlock()
			<-w.ready // granted or closed out just now
			if w.granted {
				w.granted = false
				g.woken.Add(-1)
				if submission {
					g.Undo(w, uintptr(unsafe.Pointer(w)), false) // counted at grant; it never ran
				} else {
					g.Release(w, nil)
				}
				return WaitCanceled
			}
		}
	}
	switch {
	case w.granted:
		w.granted = false
		g.woken.Add(-1)
		return WaitGranted
	case w.refused != nil: // counted when refused
		return WaitRefused
	}
	if submission {
		g.cnt[c].Rejected.Add(1)
	}
	return WaitClosed
}

// Requeue queues w again at its place (its Rank, which must have been
// computed) for its task or helper to Await a slot:
//
//   - p != nil, a Checkpoint's hand-over of the slot w's running task
//     holds: only when a task of a more urgent class waits, or one of its
//     own class ranked ahead of w, or more slots are held than the
//     capacity allows — and the door is open — is the task's slot period
//     p recorded, w queued and the slot given back (release), in that
//     order, so that the next task picked sees the time this one took
//     and no other running task hands its slot over for the same Waiter.
//     Otherwise it changes nothing and returns false (someone else handed
//     a slot over first, or the executor is closing).
//   - p == nil, a rejoin: w's task holds no slot (it gave it up for a
//     park at a Checkpoint, or w is a For helper's); w is queued and any
//     slot free now granted. With ifOpen it returns false, queuing
//     nothing, when the door is closed.
//
// A task's Waiter is Requeued from here until its Await returns.
func (g *Granter) Requeue(w *Waiter, p *SlotPeriod, ifOpen bool) bool {
	w.makeReady()
	t := g.now()
	g.lock()
	if p == nil {
		if ifOpen && g.closed.Load() {
			g.unlock()
			return false
		}
		w.requeued = w.kind != KindHelper
		w.enq = t
		g.enqueueLocked(w)
		g.dispatchLocked(&t)
		g.unlockAndWake(nil)
		return true
	}
	if g.closed.Load() || (!g.Behind(w.class, w.rank) && !g.OverCommitted()) {
		g.unlock()
		return false
	}
	g.Record(*p)
	w.requeued = true
	w.enq = t
	est := w.est
	w.est = 0 // once w is queued, a release may grant it a new one
	g.enqueueLocked(w)
	g.unlock()
	g.release(w.class, &est, nil)
	return true
}

// Withdraw takes w, a queued Go task whose ctx ended, out of its queue
// and counts the cancellation; false when it is no longer cancelable (a
// grant, a refusal or Close came first).
func (g *Granter) Withdraw(w *Waiter) bool {
	g.lock()
	if !w.cancelableLocked() {
		g.unlock()
		return false
	}
	g.removeLocked(w)
	g.unlock()
	g.cnt[w.class].Canceled.Add(1)
	g.keyDone(w)
	return true
}

// SlotPeriod is a measured slot period of a task: Slot ns, standing for
// Weight tasks (0: not timed; the fast path samples), whether the task
// queued for it, and whether its run time is split over several
// periods (it handed its slot over at a Checkpoint: its given run time,
// Target.Service, then scales nothing). The run time expected of it and
// the one it gave are its Waiter's.
type SlotPeriod struct {
	// W is the task's Waiter: a keyed task's slot time is its key's
	// (keys.go).
	W      *Waiter
	Slot   int64
	Weight uint8
	Waited bool
	Split  bool
	// Last: the task's last period (Record ends its key's charge).
	Last bool
	// ChargeOnly: a For helper's run of chunks, charged to its class's
	// slot time for the shares and fed to no estimate.
	ChargeOnly bool
}

// Record feeds the slot period p of the task of p.W (required) into the
// estimators: the charged slot time and the moving median, average and
// spread of slot times; for a task that queued, also its class's last
// slot time (the shares' estimate of a grant) and, when it gave a run
// time, the scale of given run times. A For helper's run of chunks
// (ChargeOnly) is charged and nothing else. With Last (the task's last
// period; Weight may then be 0), its key's charge ends after: every path
// that ends a charged task records its last period once, or calls Undo
// or Withdraw.
func (g *Granter) Record(p SlotPeriod) {
	c := p.W.class
	if p.ChargeOnly {
		g.cnt[c].Used.Add(p.Slot)
		return
	}
	g.recordSlot(c, p)
	if p.Last {
		g.keyDone(p.W)
	}
}

// recordSlot is Record's feed of the estimators.
func (g *Granter) recordSlot(c Class, p SlotPeriod) {
	if p.Weight == 0 {
		return
	}
	s, d := g.cnt[c], p.Slot
	s.Used.Add(d * int64(p.Weight))
	if p.W.key != nil {
		g.keyRan(p.W, c, d)
	}
	expected, declared := p.W.work, p.W.declared
	if p.Split {
		declared = 0
	}
	if p.Waited {
		g.share.lastSlot[c].Store(d)
		if declared > 0 {
			g.recordService(c, declared, d)
		}
	}
	switch med := s.MedSlotNs.Load(); {
	case med == 0:
		s.MedSlotNs.Store(d)
	case d > med:
		s.MedSlotNs.Store(med + max(med>>medShift, 1))
	case d < med:
		s.MedSlotNs.Store(med - min(max(med>>medShift, 1), med-1))
	}
	old := s.AvgSlotNs.Load()
	if old == 0 {
		s.AvgSlotNs.Store(d)
		return
	}
	s.AvgSlotNs.Store(old + (d-old)>>ewmaShift) // racy by design: an estimate
	if expected <= 0 {
		expected = old
	}
	miss := d - expected
	if miss < 0 {
		miss = -miss
	}
	dev := s.DevSlotNs.Load()
	s.DevSlotNs.Store(dev + (miss-dev)>>ewmaShift)
}

// Undo takes back the admission of w's task, which holds a slot but
// never ran: its count in Admitted (in key's shard, the key it was
// counted with), then Canceled (its ctx ended, or the lane refused it)
// or, when closed, Rejected (Close came first); its key's charge; and
// its slot (Release). The one way an admission is undone.
func (g *Granter) Undo(w *Waiter, key uintptr, closed bool) {
	s := g.cnt[w.class]
	s.Admitted.Dec(key)
	if closed {
		s.Rejected.Add(1)
	} else {
		s.Canceled.Add(1)
	}
	g.keyDone(w)
	g.Release(w, nil)
}

// Release is the one path by which the slot w's task holds goes back: a
// task finished, a task handed its slot over at a Checkpoint, a For helper
// stopped, a granted Waiter was cancelled, an admission was undone by
// Close. It drops its class's in-flight slot-time estimate (w's) and its
// SpareP count, frees the slot and hands free slots to the waiters in
// policy order (order.go); a task granted to keep's pool goes into keep
// for the worker that is releasing to run next. Then it tells the Owner
// (released).
//
// waitMask is set (bit c, an atomic Or, when class c's queue goes from
// empty to one) before a queued Waiter's dispatch looks at free, and
// Release adds to free before it looks at waitMask, so (sequentially
// consistent atomics) one of the two always sees the other: no slot stays
// free while a task waits. A Waiter that joins a class already waiting
// sets no bit: the one that set it looked at free after setting it.
//
// A Release that would leave more slots free than the capacity is a
// double Release (a slot given back twice): it is undone, logged and
// counted in doubleReleases instead of letting one more task run than
// there are slots.
func (g *Granter) Release(w *Waiter, keep *Keep) { g.release(w.class, &w.est, keep) }

// release is Release of a slot of class c whose in-flight estimate is
// *est (zeroed).
func (g *Granter) release(c Class, est *int64, keep *Keep) {
	if *est != 0 {
		g.share.inflight[c].Add(-*est)
		*est = 0
	}
	if c.RunsOnWorker() {
		g.lowRunning.Add(-1)
	} else if g.beside {
		g.highRunning.Add(-1)
	}
	f, capacity := g.free.add(1)
	if f > capacity {
		g.free.add(-1)
		g.doubleReleases.Add(1)
		g.log.Error("cpuwork: internal error: a slot was released twice; the release is ignored", "class", c, "free", f-1, "capacity", capacity)
		return
	}
	if f > 0 && g.waitMask.Load() != 0 {
		// Dispatch the slot, or have the lock's holder do it before it
		// lets the lock go (serveDispatch): a releaser that parked on the
		// lock left its slot idle until it was scheduled again.
		t := g.clockFor()
		if g.mu.TryLock() || g.wantDispatch() {
			g.dispatchLocked(&t)
			g.unlockAndWake(keep)
		}
	}
	g.owner.Released()
}

// setCapacityLocked is the one way the capacity changes: slots in total,
// of which one is held closed while the fractional quota's extra slot is
// (extraClosed). The difference goes to free (negative while running
// tasks exceed it: they hand their slots back at their next Checkpoint),
// the SpareP bound follows, and free slots go to the waiters; t is the
// time read before mu (clockFor).
func (g *Granter) setCapacityLocked(slots int, extraClosed bool, t int64) {
	oldSlots := g.slots
	old := oldSlots
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
	if g.beside {
		// Each side has the slots: the capacity is twice them, less the
		// budget's side's extra slot while it is closed. The batch side
		// is never paced: its tasks cannot give a slot back when the
		// extra one closes (they run no Checkpoint: why they are
		// beside), and under a quota their CPU is capped by a cgroup of
		// their own, so a closed slot held by batch would only shut the
		// requests out.
		g.lowCap.Store(int64(max(slots, 1)))
		g.highCap.Store(int64(max(now, 1)))
		old, now = oldSlots+old, slots+now
	}
	// One atomic step for both, so a release (which reads both without
	// the lock) never sees the new capacity beside the old free count.
	g.free.resize(int64(now), int64(now-old))
	g.dispatchLocked(&t)
}

// SetCapacity sets the slot count (SetCapacity, a budget change).
func (g *Granter) SetCapacity(n int) {
	t := g.clockFor()
	g.lock()
	g.setCapacityLocked(n, g.extraClosed, t)
	g.unlockAndWake(nil)
}

// Close closes the door: every later submission is refused with
// ErrClosed, and queued waiters stay queued and are served. With drain,
// every Waiter is taken out of the queues instead and returned, in class
// order, for the caller to fail (Close, when its ctx ended).
func (g *Granter) Close(drain bool) []*Waiter {
	g.lock()
	defer g.unlock()
	g.closed.Store(true)
	if !drain {
		return nil
	}
	var ws []*Waiter
	for c := range g.queues {
		for w := g.queues[c].popFront(); w != nil; w = g.queues[c].popFront() {
			g.dequeuedLocked(w, true)
			if !w.started {
				g.keyDone(w) // closed out before it ran
			}
			ws = append(ws, w)
		}
	}
	return ws
}

// Quiet reports whether nobody is queued and idle, called under the lock,
// holds too: a grant takes a Waiter out of the queue and counts its
// admission in one section of it, so idle sees both or neither.
func (g *Granter) Quiet(idle func() bool) bool {
	if g.Waiting() {
		return false
	}
	g.lock()
	defer g.unlock()
	return !g.Waiting() && idle()
}

// Snapshot is the core's state at one instant, for Stats and tests.
type Snapshot struct {
	// Slots is the slot count; Free the free ones (with batch beside the
	// budget, the budget's side's); Closed whether the door is closed;
	// Queued the queue length of each class.
	Slots, Free int
	Closed      bool
	Queued      [NumClasses]int
	// ServiceSlots is what the door divides the work ahead by: the
	// slots, or the paced quota's measured average below them.
	ServiceSlots float64
	// DoubleReleases counts the releases ignored because no slot was held.
	DoubleReleases uint64
	// Keys is up to the n keys asked for with the most slot time, then
	// refusals, most first, of every class; UntrackedKeys the tasks
	// queued untracked; ActiveKeys the sharers with work in flight
	// (earned keys, and each class's pool).
	Keys          []KeyStat
	UntrackedKeys uint64
	ActiveKeys    int32
}

// Snapshot reads the slot count, the free slots, the door and the queue
// lengths at one instant, with the top keys of every class (up to keys
// of them) and the counters beside.
func (g *Granter) Snapshot(keys int) Snapshot {
	var s Snapshot
	if keys > 0 {
		s.Keys, s.UntrackedKeys = g.topKeys(keys)
	}
	s.ActiveKeys = g.activeKeys()
	s.ServiceSlots = g.serviceSlots()
	s.DoubleReleases = g.doubleReleases.Load()
	g.lock()
	defer g.unlock()
	for c := range g.queues {
		s.Queued[c] = g.queues[c].n
	}
	f := g.free.freeSlots()
	if g.beside {
		f = min(f, g.highCap.Load()-g.highRunning.Load())
	}
	s.Slots, s.Free, s.Closed = g.slots, int(f), g.closed.Load()
	return s
}

// serviceSlots is what the door divides the work ahead by: the slots, or
// the paced quota's measured average when it is below them. It takes no
// lock (a task's end charges its key with it).
func (g *Granter) serviceSlots() float64 {
	n := float64(max(g.nslots.Load(), 1))
	if c := math.Float64frombits(g.pacedCap.Load()); c > 0 && c < n {
		return c
	}
	return n
}

// tryAcquire takes a free slot for a Critical or Interactive task if one
// is free and nobody is queued (queued tasks are served first; a fresh
// arrival does not overtake them), within highCap when it is set.
func (g *Granter) tryAcquire() bool {
	if g.waitersAhead() {
		return false
	}
	if hc := g.highCap.Load(); hc != 0 {
		if g.highRunning.Add(1) > hc {
			g.highRunning.Add(-1)
			return false
		}
		if !g.free.take() {
			g.highRunning.Add(-1)
			return false
		}
		return true
	}
	return g.free.take()
}

// takeLow is tryAcquire for Batch and Background: never counted in
// highRunning.
func (g *Granter) takeLow() bool {
	return g.waitMask.Load() == 0 && g.free.take()
}

// TryAcquire takes a free slot for a task of class c if one is free and
// nobody queued is ahead of it (queued tasks are served first; a fresh
// arrival does not overtake them). Critical and Interactive stay within
// highCap when it is set; Batch and Background respect the SpareP bound
// and count their slot in lowRunning (under the lock when the bound
// applies, so concurrent callers cannot both pass it).
func (g *Granter) TryAcquire(c Class) bool {
	if !c.RunsOnWorker() {
		if g.waitMask.Load() == 0 && g.highCap.Load() == 0 {
			return g.free.take() // nobody queued and no bound: the common case
		}
		return g.tryAcquire()
	}
	return g.tryAcquireLow()
}

// tryAcquireLow is TryAcquire for Batch and Background.
func (g *Granter) tryAcquireLow() bool {
	if g.lowCap.Load() == 0 {
		if !g.takeLow() {
			return false
		}
		g.lowRunning.Add(1)
		return true
	}
	g.lock()
	defer g.unlock()
	if lc := g.lowCap.Load(); lc > 0 && g.lowRunning.Load() >= lc {
		return false
	}
	if !g.takeLow() {
		return false
	}
	g.lowRunning.Add(1)
	return true
}

// Keep is where a worker whose task just ended takes the next task
// granted to its own pool, to run it itself: sending it to the pool's
// queue would wake another worker goroutine (ready, wakep: a thread wake
// and a spinning M) while this one parks (chansend -> wakep -> futex
// wake, and the parked worker's stopm).
type Keep struct {
	Pool int
	Task any // the executor's task
}

// dispatchLocked hands free slots to queued waiters in policy order.
// t is the time read before mu was taken (clockFor; 0: read here, once,
// if a decision needs it).
func (g *Granter) dispatchLocked(t *int64) {
	for g.waitMask.Load() != 0 {
		if !g.free.take() {
			return
		}
		w := g.pickLocked(t)
		if w == nil { // none eligible now (SpareP's slot with only Batch queued, say): keep the slot free
			g.free.add(1)
			return
		}
		g.grantLocked(w, t)
	}
}

// grantLocked gives a slot to w, just out of the queue: it counts the
// admission (a submission's first grant only) and queues w's wake-up.
func (g *Granter) grantLocked(w *Waiter, t *int64) {
	w.granted, w.started = true, true
	s := g.cnt[w.class]
	first := !w.requeued && w.kind != KindHelper
	if first {
		s.Admitted.Inc(uintptr(unsafe.Pointer(w))) // before the controller reads it (codelTickLocked)
	}
	if first && g.shed[w.class].target > 0 {
		now := g.at(t)
		g.codelGrantLocked(w.class, now-w.enq, now)
	}
	if w.class.RunsOnWorker() {
		g.lowRunning.Add(1)
	} else if g.beside {
		g.highRunning.Add(1)
	}
	// The grant's expected slot time: what the Waiter was queued with
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
	if w.kind != KindTask || w.requeued {
		g.woken.Add(1)
	}
	g.pending = append(g.pending, w)
}

// lockSpins is how many times lock tries mu again, between reads of a
// shared word, before it waits for mu as sync.Mutex does.
const lockSpins = 100

// lock takes mu, spinning briefly first. Every section under mu is short
// (a queue insert, a dispatch: a few hundred nanoseconds), so a holder on
// another core lets it go within a spin; sync.Mutex itself spins only
// while the caller's run queue is empty, and otherwise parks at once. A
// parked waiter queues behind the running tasks of its P; once one has
// waited 1 ms the mutex hands itself to waiters and each unlocker yields
// its P — a task just granted a slot then waited behind them too (10 µs
// tasks on 2 cores lost a sixth of their slots' time).
func (g *Granter) lock() {
	for range lockSpins {
		if g.mu.TryLock() {
			return
		}
		for range 8 {
			if g.waitMask.Load() == 1<<31 { // a shared read as a pause: never true
				break
			}
		}
	}
	g.mu.Lock()
}

// unlock releases mu and serves a dispatch a release asked for while
// mu was held (serveDispatch).
func (g *Granter) unlock() {
	g.mu.Unlock()
	g.serveDispatch()
}

// unlockAndWake releases mu, then has the Owner wake the waiters
// granted or refused while it was held, putting the first task granted
// to keep's pool into keep (when keep is not nil) instead of sending it;
// then it serves a dispatch a release asked for meanwhile.
func (g *Granter) unlockAndWake(keep *Keep) {
	g.unlockWaking(keep)
	g.serveDispatch()
}

// unlockWaking releases mu and wakes the waiters granted or refused
// while it was held, outside it.
func (g *Granter) unlockWaking(keep *Keep) {
	if len(g.pending) == 0 {
		g.mu.Unlock()
		return
	}
	var buf [8]*Waiter
	ws := append(buf[:0], g.pending...)
	clear(g.pending)
	g.pending = g.pending[:0]
	g.mu.Unlock()
	for _, w := range ws {
		if w.kind != KindTask {
			w.Signal() // a blocked caller or helper: Await returns
			continue
		}
		g.owner.Wake(w, keep)
	}
}

// wantDispatch asks the lock's holder to dispatch (dispatchWanted) and
// tries the lock once more, in case it was let go meanwhile: true when
// the caller holds it now and dispatches itself.
func (g *Granter) wantDispatch() bool {
	g.dispatchWanted.Store(true)
	if !g.mu.TryLock() {
		return false
	}
	g.dispatchWanted.Store(false)
	return true
}

// serveDispatch dispatches free slots for a release that found mu held
// (dispatchWanted): a release never waits for the lock. The release sets
// the flag before it tries the lock and a holder reads it after it lets
// the lock go, so (sequentially consistent atomics) one of the two
// dispatches: the releaser if its second TryLock won, else the holder,
// or whoever took the lock in between, on its own unlock.
func (g *Granter) serveDispatch() {
	for g.dispatchWanted.Load() {
		t := g.clockFor()
		if !g.mu.TryLock() {
			return
		}
		g.dispatchWanted.Store(false)
		g.dispatchLocked(&t)
		g.unlockWaking(nil)
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
