package admission

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// order records the order in which tasks ran.
type order struct {
	mu  sync.Mutex
	ran []string
}

func (o *order) task(name string) func(context.Context) error {
	return func(context.Context) error {
		o.mu.Lock()
		o.ran = append(o.ran, name)
		o.mu.Unlock()
		return nil
	}
}

// earn makes names keys of class c that have earned a share (as if a
// task of each had been served from the queue).
func earn(g *Granter, c Class, names ...string) {
	g.lock()
	defer g.unlock()
	g.keys[c].inUse = true
	for _, n := range names {
		g.keys[c].entryLocked(n, g.now()).earned.Store(true)
	}
}

// A key past its share queues behind a key within it: with one slot
// held, a flooding key queues eight tasks of 500 ms (its clock runs
// 500 ms ahead per task), then a key that ran nothing queues one. FIFO
// would run the newcomer last; by key it runs right after the flood's
// first.
func TestAKeyPastItsShareQueuesBehindTheOthers(t *testing.T) {
	e := newExec(t, Options{Slots: 1})
	earn(&e.g, Batch, "flood", "light")
	release := hold(t, e, 1)
	var o order
	svc := WithTarget(context.Background(), Target{Service: 500 * time.Millisecond})
	var tasks []*testTask
	for i := range 8 {
		tk, err := e.Go(WithKey(svc, "flood"), Batch, o.task(fmt.Sprint("flood", i)))
		if err != nil {
			t.Fatal(err)
		}
		tasks = append(tasks, tk)
	}
	tk, err := e.Go(WithKey(svc, "light"), Batch, o.task("light"))
	if err != nil {
		t.Fatal(err)
	}
	tasks = append(tasks, tk)
	waitQueued(t, e, Batch, 9)
	release()
	for _, tk := range tasks {
		tk.Wait(context.Background())
	}
	if len(o.ran) != 9 || o.ran[1] != "light" {
		t.Errorf("ran %v: want the light key's task second, before the flood's later tasks", o.ran)
	}
}

// Without keys the same tasks run in arrival order: the ranking changes
// nothing for tasks that carry none.
func TestTasksWithoutKeysKeepArrivalOrder(t *testing.T) {
	e := newExec(t, Options{Slots: 1})
	release := hold(t, e, 1)
	var o order
	svc := WithTarget(context.Background(), Target{Service: 10 * time.Millisecond})
	var tasks []*testTask
	for i := range 5 {
		tk, err := e.Go(svc, Batch, o.task(fmt.Sprint(i)))
		if err != nil {
			t.Fatal(err)
		}
		tasks = append(tasks, tk)
	}
	waitQueued(t, e, Batch, 5)
	release()
	for _, tk := range tasks {
		tk.Wait(context.Background())
	}
	if fmt.Sprint(o.ran) != "[0 1 2 3 4]" {
		t.Errorf("ran %v: want arrival order", o.ran)
	}
}

// When a class sheds, the key past its share is shed first: with a
// 100 ms objective and 10 ms tasks on one held slot, the flood queues
// until the door refuses it; a task of another key then still gets in,
// since the flood's queue is ranked behind it.
func TestAKeyPastItsShareIsShedFirst(t *testing.T) {
	e := newExec(t, Options{Slots: 1})
	earn(&e.g, Interactive, "flood", "light")
	release := hold(t, e, 1)
	defer release()
	obj := WithTarget(context.Background(), Target{Latency: 100 * time.Millisecond, Service: 10 * time.Millisecond})
	noop := func(context.Context) error { return nil }
	var floodErr error
	queued := 0
	for range 50 {
		_, err := e.Go(WithKey(obj, "flood"), Interactive, noop)
		if err != nil {
			floodErr = err
			break
		}
		queued++
	}
	if !errors.Is(floodErr, ErrDeadline) && !errors.Is(floodErr, ErrSaturated) {
		t.Fatalf("the flood queued %d tasks and was never refused (%v)", queued, floodErr)
	}
	if _, err := e.Go(WithKey(obj, "light"), Interactive, noop); err != nil {
		t.Errorf("a task of a key within its share, the flood's %d tasks queued: %v; want it admitted", queued, err)
	}
	// The flood's next tasks are refused, but for the late budget's run
	// (door.go: about ten late tasks in a row go after a fresh start; the
	// light task in flight now spares the flood, within its share, from
	// the standing-queue test).
	admitted := 0
	for range 20 {
		if _, err := e.Go(WithKey(obj, "flood"), Interactive, noop); err == nil {
			admitted++
		}
	}
	if admitted > 15 {
		t.Errorf("%d of the flood's next 20 tasks were admitted: want it refused still, beyond the late budget's run", admitted)
	}
	top, _ := e.g.topKeys(10)
	for _, k := range top {
		if k.Name == "flood" && k.Refused == 0 {
			t.Errorf("flood: %+v, want its refusals counted", k)
		}
	}
}

// A key's charge is its tasks' measured slot time: a task that never
// ran gives its charge back, and after every task has ended no key has
// work in flight.
func TestAKeysChargeFollowsItsTasks(t *testing.T) {
	e := newExec(t, Options{Slots: 1})
	earn(&e.g, Batch, "gone", "ran")
	release := hold(t, e, 1)
	ctx, cancel := context.WithCancel(context.Background())
	svc := WithTarget(context.Background(), Target{Service: 50 * time.Millisecond})
	var tasks []*testTask
	for range 4 {
		tk, err := e.Go(WithKey(ctx, "gone"), Batch, func(context.Context) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		tasks = append(tasks, tk)
	}
	tk, err := e.Go(WithKey(svc, "ran"), Batch, func(context.Context) error {
		time.Sleep(2 * time.Millisecond)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	waitQueued(t, e, Batch, 5)
	top, _ := e.g.topKeys(10)
	if len(top) != 2 || top[0].Lead <= 0 {
		t.Fatalf("keys while queued: %+v: want two, charged ahead", top)
	}
	cancel()
	for _, tk := range tasks {
		tk.Wait(context.Background())
	}
	release()
	tk.Wait(context.Background())
	top, _ = e.g.topKeys(10)
	for _, k := range top {
		if k.Queued != 0 {
			t.Errorf("%+v: work in flight after every task ended", k)
		}
		switch k.Name {
		case "gone":
			if k.Slot != 0 || k.Lead > int64(time.Millisecond) {
				t.Errorf("%+v: cancelled before running: want no slot time and its charge given back", k)
			}
		case "ran":
			if k.Slot < int64(2*time.Millisecond) || k.Lead > int64(10*time.Millisecond) {
				t.Errorf("%+v: want its measured slot time (>= 2 ms), its 50 ms expectation put right", k)
			}
		}
	}
}

// A million keys fit in a bounded table: a key with work in flight is
// never dropped, the others make room, and the heap stays small.
func TestAMillionKeysKeepTheTableBounded(t *testing.T) {
	var g Granter
	g.Init(Config{Counters: [NumClasses]*Counters{{}, {}, {}, {}}, Owner: nopOwner{}})
	g.SetCapacity(2)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	g.lock()
	kt := &g.keys[Batch]
	heavy := kt.entryLocked("heavy", 0)
	heavy.earned.Store(true)
	heavy.active.Store(1)
	kt.active.Store(1)
	for i := range 1_000_000 {
		ks := kt.entryLocked(fmt.Sprint("tenant-", i), int64(i))
		if ks == nil {
			g.unlock()
			t.Fatalf("key %d untracked while the table has idle keys", i)
		}
		ks.slot.Store(int64(i % 7))
		ks.earned.Store(i%2 == 0)
	}
	n := len(kt.m)
	kept := kt.entryLocked("heavy", 0) == heavy
	g.unlock()
	runtime.GC()
	runtime.ReadMemStats(&after)
	if n > keyTableMax || !kept {
		t.Errorf("after 10^6 keys: %d tracked (bound %d), the key with work in flight kept: %v", n, keyTableMax, kept)
	}
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 4<<20 {
		t.Errorf("the heap grew %d bytes with %d keys tracked: want at most 4 MiB", grew, n)
	}
}

// With every tracked key busy, a new key's tasks are charged to the
// pool untracked, and the next keyTableMax/4 new keys do not sweep the
// table again: a full table costs an arrival no walk of it.
func TestAFullTableOfBusyKeysLeavesNewKeysUntracked(t *testing.T) {
	var g Granter
	g.Init(Config{Counters: [NumClasses]*Counters{{}, {}, {}, {}}, Owner: nopOwner{}})
	g.SetCapacity(2)
	g.lock()
	defer g.unlock()
	kt := &g.keys[Batch]
	for i := range keyTableMax {
		ks := kt.entryLocked(fmt.Sprint(i), 0)
		ks.earned.Store(true)
		ks.active.Store(1)
	}
	kt.active.Store(keyTableMax)
	w := &Waiter{class: Batch}
	g.keyRankLocked("new", true, w, 0)
	if w.key != &kt.pool || w.entry != nil || kt.untracked.Load() != 1 {
		t.Errorf("a new key with %d busy ones: charged to the pool %v, tracked %v, untracked count %d", keyTableMax, w.key == &kt.pool, w.entry != nil, kt.untracked.Load())
	}
	if kt.sweepIn != keyTableMax/4 {
		t.Errorf("after a sweep that freed nothing, the next sweep in %d new keys: want %d", kt.sweepIn, keyTableMax/4)
	}
	for i := range keyTableMax / 4 {
		kt.entryLocked(fmt.Sprint("more-", i), 0)
	}
	if kt.sweepIn != 0 {
		t.Errorf("after %d more new keys, the next sweep in %d: want 0", keyTableMax/4, kt.sweepIn)
	}
}

type nopOwner struct{}

func (nopOwner) Wake(*Waiter, *Keep) {}
func (nopOwner) Released()           {}

// A shedding class's standing-queue test refuses tasks of keys past
// their share and unkeyed ones, not a key within its share: with the
// hold at a fifth (admitted up to 40 ms of estimated wait), a new key's
// task that would wait 90 ms behind two other keys' tasks gets in,
// while a task of a key 8 s past its share is refused.
func TestAShedClassSparesAKeyWithinItsShare(t *testing.T) {
	e := newExec(t, Options{Slots: 1})
	release := sync.OnceFunc(hold(t, e, 1))
	defer release()
	e.stats[Interactive].AvgSlotNs.Store(int64(45 * time.Millisecond))
	obj := func(key string) context.Context {
		return WithKey(WithTarget(context.Background(), Target{Latency: time.Second}), key)
	}
	earn(&e.g, Interactive, "a", "b", "flood", "light")
	noop := func(context.Context) error { return nil }
	var tasks []*testTask
	for _, k := range []string{"a", "b"} {
		tk, err := e.Go(obj(k), Interactive, noop)
		if err != nil {
			t.Fatal(err)
		}
		tasks = append(tasks, tk)
	}
	e.g.lock()
	e.g.keys[Interactive].entryLocked("flood", now()).vc.Store(now() + int64(8*time.Second))
	st := &e.g.shed[Interactive]
	st.mode, st.iv.start, st.hold = shedding, now()+int64(time.Hour), 0.2
	e.g.unlock()
	if _, err := e.Go(obj("flood"), Interactive, noop); err == nil {
		t.Error("a task of the key past its share was admitted under the hold")
	}
	tk, err := e.Go(obj("light"), Interactive, noop)
	if err != nil {
		t.Errorf("a task of a key within its share was refused under the hold: %v", err)
	} else {
		tasks = append(tasks, tk)
	}
	release()
	for _, tk := range tasks {
		tk.Wait(context.Background())
	}
}

// The backlog refusal of a severely outrun class (door.go) spares a task
// of a sharer within its share while another sharer has work in flight:
// the backlog is the sharers' past theirs. Unkeyed tasks share the pool
// once the class has seen a key, and are spared on the same terms; with
// no other sharer in flight, the backlog is everyone's.
func TestABacklogRefusalSparesAKeyWithinItsShare(t *testing.T) {
	e, st := sheddingWithOneBehind(t)
	st.severe = true
	t0 := now()
	kt := &e.g.keys[Interactive]
	waited := func(key string, keyed bool, lead time.Duration) *Waiter {
		w := &Waiter{class: Interactive, target: targetObjective, enq: t0 - int64(time.Second)}
		e.g.keyRankLocked(key, keyed, w, t0)
		if w.key != nil {
			w.key.vc.Store(t0 + int64(lead))
			e.g.keyRankLocked(key, keyed, w, t0)
		}
		return w
	}
	if !e.g.backlogLocked(waited("", false, 0), t0) {
		t.Error("an unkeyed task in a class that has seen no key, waited 1 s: not refused as backlog")
	}
	e.g.unlock()
	earn(&e.g, Interactive, "light", "flood", "busy")
	e.g.lock()
	if e.g.backlogLocked(waited("light", true, 0), t0) == false {
		t.Error("a key within its share, no other sharer in flight: spared, want refused as backlog")
	}
	busy := kt.entryLocked("busy", t0)
	busy.active.Store(1)
	kt.active.Store(1)
	if e.g.backlogLocked(waited("light", true, 0), t0) {
		t.Error("a task of a key within its share, waited 1 s, another sharer in flight: refused as backlog")
	}
	if !e.g.backlogLocked(waited("flood", true, 8*time.Second), t0) {
		t.Error("a task of a key 8 s past its share, waited 1 s: not refused as backlog")
	}
	if e.g.backlogLocked(waited("", false, 0), t0) {
		t.Error("an unkeyed task (the pool within its share), waited 1 s, another sharer in flight: refused as backlog")
	}
	if e.g.backlogLocked(waited("new", true, 0), t0) {
		t.Error("a new key's task (the pool within its share), waited 1 s, another sharer in flight: refused as backlog")
	}
	if !e.g.backlogLocked(waited("", false, 8*time.Second), t0) {
		t.Error("an unkeyed task, the pool 8 s past its share: not refused as backlog")
	}
}

// The sharers of a class's slots are those with work in flight: a key
// whose clock is ahead but has nothing queued or running does not count,
// so keys made up and left behind cannot thin the others' shares.
func TestOnlySharersWithWorkInFlightCount(t *testing.T) {
	e := newExec(t, Options{Slots: 2})
	earn(&e.g, Batch, "ahead", "behind", "busy")
	e.g.lock()
	defer e.g.unlock()
	t0 := now()
	kt := &e.g.keys[Batch]
	kt.entryLocked("ahead", t0).vc.Store(t0 + int64(time.Second))
	kt.entryLocked("behind", t0).vc.Store(t0 - int64(time.Second))
	w := &Waiter{class: Batch}
	e.g.keyRankLocked("busy", true, w, t0)
	e.g.keyChargeLocked(w, t0)
	if n, r := kt.active.Load(), e.g.keyRate(Batch); n != 1 || r != 0.5 {
		t.Errorf("sharers %d, rate %v: want 1 (busy) over 2 slots", n, r)
	}
	e.g.keyDone(w)
	if n := kt.active.Load(); n != 0 {
		t.Errorf("sharers after the task ended: %d, want 0", n)
	}
}

// A full table of long keys stays within the bound the docs state: under
// 1 MiB a class (keyTableMax keys, each a digest and at most keyNameMax
// bytes of its string), whatever the keys' length.
func TestAFullTableIsUnderAMebibyte(t *testing.T) {
	var g Granter
	g.Init(Config{Counters: [NumClasses]*Counters{{}, {}, {}, {}}, Owner: nopOwner{}})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	g.lock()
	for i := range keyTableMax {
		g.keys[Batch].entryLocked(fmt.Sprint(i, "-", strings.Repeat("k", 1000)), 0)
	}
	g.unlock()
	runtime.GC()
	runtime.ReadMemStats(&after)
	grew := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("a full table of %d keys of 1,000 bytes: %d bytes, %d a key", keyTableMax, grew, grew/keyTableMax)
	if grew > 1<<20 {
		t.Errorf("a full table took %d bytes: the docs say under 1 MiB a class", grew)
	}
	runtime.KeepAlive(&g)
}
