package admission

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A waiter granted a slot leaves the queue and is counted as admitted in
// one section of the granter's lock. The executor's Close asks Quiet
// whether nothing is queued and its idle check (admitted == completed)
// holds; Quiet must see both steps of a grant or neither: read between
// them (the queue already empty, the admission not yet counted), Close
// reported the executor drained while the granted task was about to run
// (the stress test once saw "Close returned drained while 1 tasks ran").
// The test holds the lock between the two steps while Quiet runs.
func TestQuietNeverSeesAGrantHalfDone(t *testing.T) {
	e := newExec(t, Options{Slots: 1})
	w := &Waiter{class: Interactive, kind: KindCaller, ready: make(chan struct{}, 1)}
	w.enq = now()
	idle := func() bool {
		s := &e.stats[Interactive]
		done := s.Completed.Load()
		return s.Admitted.Load() == done
	}
	e.g.lock()
	e.g.enqueueLocked(w)
	// The grant of dispatchLocked, in two steps with Quiet run between.
	if !e.g.free.take() {
		t.Fatal("no free slot")
	}
	if got := e.g.pickLocked(new(int64)); got != w {
		t.Fatalf("picked %p, want the waiter %p", got, w)
	}
	quiet := make(chan bool, 1)
	go func() { quiet <- e.g.Quiet(idle) }()
	time.Sleep(20 * time.Millisecond) // Quiet reads what it reads without the lock
	e.g.grantLocked(w, new(int64))
	e.g.unlockAndWake(nil)
	<-w.ready
	if <-quiet {
		t.Error("Quiet reported no task queued or running while one was being granted its slot")
	}
	// The granted task runs and ends.
	e.stats[Interactive].Completed.Inc(0)
	e.g.release(Interactive, &w.est, nil)
	if !e.g.Quiet(idle) {
		t.Error("Quiet reported a task queued or running after it ended")
	}
}

// recordingOwner records what the Granter wakes, for tests that drive the
// protocol from one goroutine.
type recordingOwner struct{ woken []*Waiter }

func (o *recordingOwner) Wake(w *Waiter, _ *Keep) { o.woken = append(o.woken, w) }
func (o *recordingOwner) Released()               {}

// The Granter reads the clock only before it takes its lock: a section
// under the lock never waits for a clock read. Driven from one goroutine
// through every path that dispatches — the door, a grant that feeds a
// queue-wait controller, a pick that judges a target and one of the
// Background guard, a hand-over, a rejoin, a capacity change — the clock
// (the Config.Clock seam) must never find the lock held.
func TestNoClockReadUnderTheLock(t *testing.T) {
	var g Granter
	var cnt [NumClasses]Counters
	var reads, underLock int
	own := &recordingOwner{}
	cfg := Config{DefaultQueueLimit: 64, Owner: own, Log: slog.New(slog.DiscardHandler),
		Clock: func() int64 {
			reads++
			if g.mu.TryLock() {
				g.mu.Unlock()
			} else {
				underLock++
			}
			return Now()
		}}
	cfg.Classes[Interactive].LatencyTarget = time.Hour
	cfg.Classes[Batch].MaxQueueWait = time.Millisecond
	for c := range cnt {
		cfg.Counters[c] = &cnt[c]
	}
	if err := g.Init(cfg); err != nil {
		t.Fatal(err)
	}
	g.SetCapacity(1)
	if !g.tryAcquire() {
		t.Fatal("no free slot")
	}
	ctx := context.Background()
	obj := TargetContext(ctx, time.Hour, time.Millisecond)
	for _, c := range []Class{Interactive, Batch, Background, Critical} {
		for range 2 {
			w := &Waiter{class: c, kind: KindTask}
			wctx := ctx
			if c == Critical {
				wctx = obj
			}
			if err := g.Admit(wctx, w); err != nil {
				t.Fatalf("%s: %v", c, err)
			}
		}
	}
	g.Pacer().SetExtraOpen(false) // a capacity change while all wait
	g.Pacer().SetExtraOpen(true)
	var est int64
	g.release(Interactive, &est, nil) // the held slot: to the first Critical task
	// A Batch task holding that slot at a Checkpoint hands it over (more
	// urgent classes wait), and an Interactive one rejoins after a park.
	hb := &Waiter{class: Batch, ready: make(chan struct{}, 1), dueSet: true, due: math.MaxInt64}
	if !g.Requeue(hb, &SlotPeriod{W: hb}, false) {
		t.Fatal("no hand-over while more urgent classes wait")
	}
	ri := &Waiter{class: Interactive, ready: make(chan struct{}, 1)}
	if !g.Requeue(ri, nil, true) {
		t.Fatal("no rejoin")
	}
	// The Granter signals a blocked caller or helper itself (Ready), the
	// Owner wakes the tasks.
	signalled := 0
	woken := func() int {
		for _, ch := range []chan struct{}{hb.ready, ri.ready} {
			select {
			case <-ch:
				signalled++
			default:
			}
		}
		return len(own.woken) + signalled
	}
	for g.Waiting() { // each granted task ends: the next is granted
		n := woken()
		est = 0
		g.release(Interactive, &est, nil)
		if woken() == n {
			t.Fatal("a release granted nobody while tasks waited")
		}
	}
	if reads == 0 {
		t.Fatal("the clock was never read: the test drove nothing")
	}
	if underLock != 0 {
		t.Errorf("%d of %d clock reads were made under the lock", underLock, reads)
	}
}

// BenchmarkLockHold is the work a queued task puts under the Granter's
// lock, from one goroutine (no contention, no wake-up): an Admit that
// queues (the door, the insert, a dispatch that finds no free slot) and
// the Release that grants it (a pick and a grant), plus the little
// around them. Its time per task bounds the hold time h in the model of
// docs/performance.md: one lock serves at most 1/h queued tasks a
// second, so P cores queue tasks shorter than P x h faster than it can.
func BenchmarkLockHold(b *testing.B) {
	own := &recordingOwner{}
	g, _ := heldGranter(b, own, nil)
	ctx := context.Background()
	ws := make([]Waiter, 1024)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		w := &ws[i%len(ws)]
		*w = Waiter{class: Interactive, kind: KindTask}
		g.Admit(ctx, w)
		var est int64
		g.release(Interactive, &est, nil) // grants w: the slot is held again
		own.woken = own.woken[:0]
		i++
	}
}

// countingOwner is an Owner safe for concurrent use that wakes nobody.
type countingOwner struct{ woken atomic.Int64 }

func (o *countingOwner) Wake(*Waiter, *Keep) { o.woken.Add(1) }
func (o *countingOwner) Released()           {}

// BenchmarkLockHoldContended is BenchmarkLockHold from GOMAXPROCS
// goroutines at once on one Granter: each queues a task and releases the
// one slot, which grants the oldest waiter, whoever queued it. Its time
// per task is the lock's: the sections of all goroutines run one at a
// time, so when the lock is the bottleneck the wall time per task is the
// hold time under contention, the moves of its cache lines between cores
// included (h_c in docs/performance.md); when it is not, it is
// BenchmarkLockHold's time over GOMAXPROCS.
func BenchmarkLockHoldContended(b *testing.B) {
	g, _ := heldGranter(b, &countingOwner{}, nil)
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		// A waiter is reused 1024 of this goroutine's tasks later: long
		// granted by then (FIFO, at most one waiter queued per goroutine
		// beyond the one granted per release).
		ws := make([]Waiter, 1024)
		i := 0
		for pb.Next() {
			w := &ws[i%len(ws)]
			*w = Waiter{class: Interactive, kind: KindTask}
			g.Admit(ctx, w)
			var est int64
			g.release(Interactive, &est, nil)
			i++
		}
	})
}

// Every waiter counted as woken (granted, signalled, not yet back from
// Await) is uncounted once it returns, whether it runs or its ctx ended
// as it was granted: a count left behind would make every later
// submission yield its P first.
func TestWokenWaitersAreUncounted(t *testing.T) {
	e := newExec(t, Options{Slots: 1})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 200 {
				ctx := context.Background()
				if (i+j)%7 == 0 {
					c, cancel := context.WithTimeout(ctx, time.Duration(j%3)*time.Microsecond)
					defer cancel()
					ctx = c
				}
				e.Do(ctx, Interactive, func(context.Context) error { return nil })
			}
		})
	}
	wg.Wait()
	if n := e.g.woken.Load(); n != 0 {
		t.Errorf("%d waiters still counted as woken after every task returned", n)
	}
	if m := e.g.waitMask.Load(); m != 0 {
		t.Errorf("classes %b still have waiters queued", m)
	}
}

// A waiter whose ctx ends just as it is granted a slot gives the slot
// back and is uncounted as woken: its Await sees ctx's end first, then
// finds itself granted. The test holds the lock across the grant so that
// the end comes between the grant and the wake-up.
func TestAWaiterCanceledAsItIsGrantedIsUncounted(t *testing.T) {
	e := newExec(t, Options{Slots: 1})
	release := hold(t, e, 1)
	defer release()
	// The waiter must be in Await's select when its ctx ends (it then
	// takes the end, Ready being unsent); a waiter that got there only
	// after the wake-up may take the grant instead: the round is tried
	// again, at most 5 times.
	for round := range 5 {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- e.Do(ctx, Interactive, func(context.Context) error { return nil }) }()
		waitQueued(t, e, Interactive, 1)
		e.g.lock()
		e.g.free.add(1) // a slot for the waiter, granted under the lock
		var at int64
		e.g.dispatchLocked(&at)
		time.Sleep(20 * time.Millisecond) // the waiter reaches its select
		cancel()                          // Await takes the ctx's end and waits for the lock
		time.Sleep(20 * time.Millisecond)
		e.g.unlockAndWake(nil)
		err := <-done
		e.g.free.add(-1) // the extra slot, given back by the waiter or its task
		if n := e.g.woken.Load(); n != 0 {
			t.Fatalf("round %d: %d waiters counted as woken after the waiter returned (%v)", round, n, err)
		}
		if errors.Is(err, context.Canceled) {
			return
		}
		if err != nil {
			t.Fatalf("Do: %v, want context.Canceled or nil", err)
		}
	}
	t.Fatal("in 5 rounds the waiter never took its ctx's end before the grant")
}

// With batch beside the budget (Config.Beside), each side holds at most
// the slots: Interactive tasks get every slot however many Batch tasks
// run, Batch tasks only slots of their own, and neither yields to the
// other at a Checkpoint.
func TestBatchBesideTheBudgetHasSlotsOfItsOwn(t *testing.T) {
	var g Granter
	var cnt [NumClasses]Counters
	cfg := Config{DefaultQueueLimit: 16, Beside: true, Owner: nopOwner{}, Log: slog.New(slog.DiscardHandler)}
	for c := range cnt {
		cfg.Counters[c] = &cnt[c]
	}
	if err := g.Init(cfg); err != nil {
		t.Fatal(err)
	}
	g.SetCapacity(2)
	if !g.TryAcquire(Batch) || !g.TryAcquire(Batch) {
		t.Fatal("two Batch tasks did not get the batch side's two slots")
	}
	if g.TryAcquire(Background) {
		t.Error("a third batch-side task got a slot: the batch side has two")
	}
	if !g.tryAcquire() || !g.tryAcquire() {
		t.Fatal("two Interactive tasks did not get the budget's two slots beside two Batch tasks")
	}
	if g.tryAcquire() {
		t.Error("a third Interactive task got a slot: the budget has two")
	}
	if g.urgent[Batch]&(1<<Interactive) != 0 || g.urgent[Interactive]&(1<<Critical) == 0 || g.urgent[Background]&(1<<Batch) == 0 {
		t.Errorf("urgent masks %b %b %b: Batch must not yield to Interactive, Interactive must to Critical, Background to Batch",
			g.urgent[Batch], g.urgent[Interactive], g.urgent[Background])
	}
	var est int64
	g.release(Batch, &est, nil)
	if g.tryAcquire() {
		t.Error("a Batch slot's release let a third Interactive task in")
	}
	if !g.TryAcquire(Batch) {
		t.Error("a Batch task did not get the slot a Batch task released")
	}
	g.release(Interactive, &est, nil)
	if !g.tryAcquire() {
		t.Error("an Interactive task did not get the slot an Interactive task released")
	}
}

// Queued Critical or Interactive tasks are always ahead of a fresh
// Critical or Interactive arrival; queued Batch or Background ones only
// where they could take the slot it would take: sharing the slots with
// it and under their SpareP bound.
func TestWaitersAheadOfAFreshRequest(t *testing.T) {
	const batch, inter = 1 << Batch, 1 << Interactive
	for _, c := range []struct {
		name           string
		mask           uint32
		beside         bool
		lowCap, lowRun int64
		want           bool
	}{
		{"nobody queued", 0, false, 0, 0, false},
		{"an Interactive task queued", inter, false, 0, 0, true},
		{"an Interactive task queued, beside", inter, true, 2, 2, true},
		{"batch queued, slots shared", batch, false, 0, 0, true},
		{"batch queued under its SpareP bound", batch, false, 2, 1, true},
		{"batch queued at its SpareP bound", batch, false, 2, 2, false},
		{"batch queued beside the budget", batch, true, 2, 2, false},
		{"batch queued beside, its side not full", batch, true, 2, 1, false},
	} {
		var g Granter
		g.waitMask.Store(c.mask)
		g.beside = c.beside
		g.lowCap.Store(c.lowCap)
		g.lowRunning.Store(c.lowRun)
		if got := g.waitersAhead(); got != c.want {
			t.Errorf("%s: waitersAhead() = %v, want %v", c.name, got, c.want)
		}
	}
}

// Beside the budget, the fractional quota's extra slot is the budget's
// side's: with it closed and every batch slot held by tasks that cannot
// give one back, a request still finds the side's other slot.
func TestBesideClosedExtraSlotLeavesTheBatchSide(t *testing.T) {
	g := new(Granter)
	var cnt [NumClasses]Counters
	cfg := Config{DefaultQueueLimit: 16, Beside: true, Owner: &countingOwner{}, Log: slog.New(slog.DiscardHandler)}
	for c := range cnt {
		cfg.Counters[c] = &cnt[c]
	}
	if err := g.Init(cfg); err != nil {
		t.Fatal(err)
	}
	g.SetCapacity(2)
	for range 2 {
		if !g.TryAcquire(Batch) {
			t.Fatal("a batch slot was not free")
		}
	}
	g.Pacer().SetExtraOpen(false)
	if !g.TryAcquire(Interactive) {
		t.Fatal("with the extra slot closed and both batch slots held, a request found no slot")
	}
	if g.TryAcquire(Interactive) {
		t.Error("a request took the closed extra slot")
	}
	if g.TryAcquire(Batch) {
		t.Error("a third batch task took a slot")
	}
}

// By default Interactive and Batch share the slots 64 to 1 while both
// wait (Linux's weights for nice 0 and nice 19, 1024 and 15, are 68 to
// 1): Batch keeps a trickle, not a fifth. With every task of both
// classes measured at 1 ms on one slot, Batch gets 1 or 2 of the first
// 65 grants.
func TestBatchKeepsATrickleBesideWaitingInteractiveWorkByDefault(t *testing.T) {
	own := &recordingOwner{}
	clock := int64(time.Second)
	g, _ := heldGranter(t, own, &clock)
	for i := range 200 {
		for _, c := range []Class{Interactive, Batch} {
			if err := g.Admit(context.Background(), &Waiter{class: c, kind: KindTask}); err != nil {
				t.Fatalf("submission %d of %s: %v", i, c, err)
			}
		}
	}
	var est int64
	g.release(Critical, &est, nil) // the held slot: the first grant
	batch := 0
	for i := range 65 {
		if len(own.woken) != i+1 {
			t.Fatalf("grant %d: %d woken", i, len(own.woken))
		}
		w := own.woken[i]
		if w.class == Batch {
			batch++
		}
		clock += int64(time.Millisecond)
		g.Record(SlotPeriod{W: w, Slot: int64(time.Millisecond), Weight: 1, Waited: true})
		g.release(w.class, &w.est, nil)
	}
	if batch < 1 || batch > 2 {
		t.Errorf("Batch got %d of the first 65 grants while both classes waited, want 1 or 2 (64 to 1)", batch)
	}
}

// heldGranter is a Granter of one slot, held (every Admit queues), waking
// through own, with the clock *clock (nil: Now); and its counters.
func heldGranter(tb testing.TB, own Owner, clock *int64) (*Granter, *[NumClasses]Counters) {
	tb.Helper()
	g, cnt := new(Granter), new([NumClasses]Counters)
	cfg := Config{DefaultQueueLimit: 1 << 20, Owner: own, Log: slog.New(slog.DiscardHandler)}
	if clock != nil {
		cfg.Clock = func() int64 { return *clock }
	}
	for c := range cnt {
		cfg.Counters[c] = &cnt[c]
	}
	if err := g.Init(cfg); err != nil {
		tb.Fatal(err)
	}
	g.SetCapacity(1)
	if !g.tryAcquire() {
		tb.Fatal("no free slot")
	}
	return g, cnt
}
