package admission

import (
	"cmp"
	"context"
	"math"
	"slices"
	"sync/atomic"
	"time"
)

// Fair shares across keys inside a class (WithKey: a tenant, an API key,
// a client). A class's slots are shared across its active keys — those
// with a task queued or running — by measured slot time, with a virtual
// clock per key (Zhang's VirtualClock, SIGCOMM 1990, one level below the
// class shares of order.go):
//
//   - a keyed task that queues charges its key's clock with its expected
//     run time at the key's share of the slots (run time × active keys /
//     slots): vc = max(now, vc) + charge; when it ends the charge is put
//     right by its measured slot time, and a task that never ran (refused,
//     cancelled, closed out) gives its charge back;
//   - its key's lead, how far its clock runs ahead of now, is how far
//     past its share the key is; the task is ranked at its due plus that
//     lead (Waiter.Rank), so a key within its share (no lead) keeps its
//     place in the due order and one past it queues behind every task
//     that arrives within its lead after it. The lead is capped at
//     keyLeadMax: a key that was alone and used the whole class is back
//     to an even footing within keyLeadMax once others compete, and no
//     task waits forever;
//   - the door estimates a task's wait from the work ranked ahead of it,
//     so when the class sheds, tasks of keys past their share, which see
//     more work ahead, are refused first, and a task of a key within its
//     share (a lead of at most keyPastLead) sees only the work of the
//     others within theirs; and a shedding class's test of its standing
//     queue (door.go, with an objective's target) refuses the others'
//     tasks, not its: the queue stands because of the keys past their
//     share, which it sheds, while the latency target still refuses a
//     task of a key within its share that cannot meet it;
//   - a task that finds a free slot with nobody queued is not charged: a
//     key's share matters only while tasks queue, and the fast path never
//     reads the key.
//
// Memory: each class tracks at most keyTableMax keys. A key with a task
// queued or running is never dropped (the heavy hitters are tracked
// exactly); when the table is full a new key takes the place of a key
// with nothing in flight, and while every tracked key has work in
// flight, a new key's tasks queue untracked: at their due, uncharged, as
// a key within its share (the rest, pooled).

// keyLeadMax caps a key's lead; keyPastLead is the lead past which a
// key is taken as past its share for the door's hold (keyInShare): a
// key that floods reaches the cap within seconds, while one within its
// share only passes a task's charge now and then (a 500 ms request of
// one of ten keys on two slots charges 2.5 s); keyTableMax is the keys
// tracked per class.
const (
	keyLeadMax  = int64(10 * time.Second)
	keyPastLead = keyLeadMax / 2
	keyTableMax = 4096
)

// keyCtx is the context key of WithKey's value.
type keyCtx struct{}

// WithKey returns a copy of ctx whose tasks share their class's slots
// fairly with other keys (the executor's WithKey).
func WithKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, keyCtx{}, key)
}

// KeyOf is ctx's key ("" and false: none).
func KeyOf(ctx context.Context) (string, bool) {
	k, ok := ctx.Value(keyCtx{}).(string)
	return k, ok
}

// keyState is one tracked key of a class. The table's map is guarded by
// the Granter's mu; the counters are atomics, since a task's end charges
// them without the lock. active goes from 0 to 1 only under mu, so an
// entry found under mu with active 0 is referenced by no Waiter and may
// be dropped.
type keyState struct {
	name    string
	vc      atomic.Int64  // virtual clock, g.now() ns
	active  atomic.Int32  // its tasks queued or running
	slot    atomic.Int64  // measured slot time of its tasks that queued, ns
	refused atomic.Uint64 // its tasks refused (door, head, backlog)
}

// keyTable is one class's tracked keys.
type keyTable struct {
	m      map[string]*keyState // guarded by mu
	active atomic.Int32         // keys with active > 0
	// sharing is the keys that share the class's slots now: those with
	// work in flight or a clock ahead of now (in the fluid model of fair
	// sharing, a key whose clock is ahead still has work claimed at its
	// share), counted at most every keyCountEvery (countedAt, under mu).
	sharing   atomic.Int32
	countedAt int64
	// untracked counts the tasks queued while the table was full.
	untracked atomic.Uint64
}

// lookupLocked returns name's entry, adding it if there is room (or a
// key with nothing in flight to drop); nil when every tracked key has
// work in flight.
func (kt *keyTable) lookupLocked(name string, t int64) *keyState {
	if ks, ok := kt.m[name]; ok {
		return ks
	}
	if kt.m == nil {
		kt.m = make(map[string]*keyState)
	}
	if len(kt.m) >= keyTableMax && !kt.dropLocked(t) {
		kt.untracked.Add(1)
		return nil
	}
	ks := &keyState{name: name}
	ks.vc.Store(t)
	kt.m[name] = ks
	return ks
}

// dropLocked makes room in a full table by dropping keys with nothing
// in flight: those whose lead has run out and whose slot time is below
// the table's mean first (the heavy hitters' figures are kept for
// Stats), until a quarter of the table is free; then any whose lead has
// run out; then one idle key (map order is random). It reports whether
// anything was dropped: false when every key has work in flight.
func (kt *keyTable) dropLocked(t int64) bool {
	if int32(len(kt.m)) <= kt.active.Load() {
		return false
	}
	var sum float64
	for _, ks := range kt.m {
		sum += float64(ks.slot.Load())
	}
	mean := sum / float64(len(kt.m))
	room := func() bool { return len(kt.m) <= keyTableMax*3/4 }
	for pass := range 2 {
		for name, ks := range kt.m {
			if room() {
				return true
			}
			if ks.active.Load() == 0 && ks.vc.Load() <= t && (pass == 1 || float64(ks.slot.Load()) < mean) {
				delete(kt.m, name)
			}
		}
	}
	if len(kt.m) < keyTableMax {
		return true
	}
	for name, ks := range kt.m {
		if ks.active.Load() == 0 {
			delete(kt.m, name)
			return true
		}
	}
	return false
}

// keyRankLocked finds w's key (name, read from its ctx before the lock;
// ok false: none) and ranks w: its due plus its key's lead (at most
// keyLeadMax); at its due without a key or when its key is untracked.
// The key is charged once w passes the door (keyChargeLocked).
func (g *Granter) keyRankLocked(name string, ok bool, w *Waiter, t int64) {
	w.Rank = w.Due
	if !ok {
		return
	}
	ks := g.keys[w.Class].lookupLocked(name, t)
	if ks == nil {
		return
	}
	w.key = ks
	lead := ks.vc.Load() - t
	if lead > 0 {
		w.Rank = addSat(w.Due, min(lead, keyLeadMax))
	}
	w.keyPast = lead > keyPastLead
}

// keyInShare reports whether w's task is charged to a key within its
// share: its lead was at most keyPastLead when it arrived. A shedding
// class's standing-queue test spares it (door.go).
func (w *Waiter) keyInShare() bool { return w.key != nil && !w.keyPast }

// addSat is a+b, saturated at the int64 range (b >= 0).
func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// keyRate is the clock time one ns of slot time costs a key of class c:
// the keys sharing its slots over the slots that serve the queue.
func (g *Granter) keyRate(c Class) float64 {
	kt := &g.keys[c]
	return float64(max(kt.sharing.Load(), kt.active.Load(), 1)) / g.ServiceSlots()
}

// keyCountEvery is how often a class's sharing keys are counted again.
const keyCountEvery = int64(10 * time.Millisecond)

// countLocked counts kt's sharing keys at t when the count is older than
// keyCountEvery.
func (kt *keyTable) countLocked(t int64) {
	if t-kt.countedAt < keyCountEvery {
		return
	}
	kt.countedAt = t
	n := int32(0)
	for _, ks := range kt.m {
		if ks.active.Load() > 0 || ks.vc.Load() > t {
			n++
		}
	}
	kt.sharing.Store(n)
}

// expectedSlot is what w's task is expected to hold its slot for: its
// expected run time, else its class's last measured slot time, else
// 1 ms (as a grant's estimate).
func (g *Granter) expectedSlot(w *Waiter) int64 {
	if x := g.serviceOf(w); x > 0 {
		return x
	}
	if x := g.share.lastSlot[w.Class].Load(); x > 0 {
		return x
	}
	return int64(time.Millisecond)
}

// keyChargeLocked charges w's key, w having passed the door: one more
// task in flight, and its expected slot time at the key's share.
func (g *Granter) keyChargeLocked(w *Waiter, t int64) {
	ks := w.key
	if ks == nil {
		return
	}
	kt := &g.keys[w.Class]
	if ks.active.Add(1) == 1 {
		kt.active.Add(1)
	}
	kt.countLocked(t)
	w.keyCharge = int64(float64(g.expectedSlot(w)) * g.keyRate(w.Class))
	ks.vc.Store(min(max(ks.vc.Load(), t)+w.keyCharge, t+keyLeadMax))
}

// keyRefused counts a refusal of w against its key.
func keyRefused(w *Waiter) {
	if w.key != nil {
		w.key.refused.Add(1)
	}
}

// keyRan charges ks, a key of class c, with a measured slot period of d
// ns of one of its tasks (RecordSlot), at the key's share. Without the
// lock.
func (g *Granter) keyRan(ks *keyState, c Class, d int64) {
	ks.slot.Add(d)
	ks.advance(int64(float64(d)*g.keyRate(c)), g.now())
}

// advance moves ks's clock by d (negative: back), never past t plus
// keyLeadMax.
func (ks *keyState) advance(d, t int64) {
	for {
		old := ks.vc.Load()
		if ks.vc.CompareAndSwap(old, min(old+d, t+keyLeadMax)) {
			return
		}
	}
}

// KeyDone ends w's charge to its key when its task ends for good: the
// expected slot time charged when it passed the door goes back, since
// its measured slot periods were charged instead (RecordSlot), or, if it
// never ran, it never used any. Without the lock; every path that ends
// a keyed task calls it once, after its last RecordSlot.
func (g *Granter) KeyDone(w *Waiter) {
	ks := w.key
	if ks == nil {
		return
	}
	w.key = nil
	if w.keyCharge != 0 {
		ks.advance(-w.keyCharge, g.now())
		w.keyCharge = 0
	}
	if ks.active.Add(-1) == 0 {
		g.keys[w.Class].active.Add(-1)
	}
}

// Keyed reports whether w's task is charged to a key (it is timed, so
// that its end can charge its measured slot time).
func (w *Waiter) Keyed() bool { return w.key != nil }

// KeyStat is one tracked key's figures (Keys).
type KeyStat struct {
	Class   Class
	Name    string
	Slot    int64 // measured slot time of its tasks that queued, ns
	Refused uint64
	Lead    int64 // how far past its share, ns (0: within it)
	Queued  int32 // its tasks queued or running
}

// Keys returns up to n tracked keys of every class with the most slot
// time, then refusals, most first; and the tasks queued untracked.
func (g *Granter) Keys(n int) (top []KeyStat, untracked uint64) {
	t := g.now()
	g.lock()
	for c := range g.keys {
		kt := &g.keys[c]
		untracked += kt.untracked.Load()
		for _, ks := range kt.m {
			top = append(top, KeyStat{Class: Class(c), Name: ks.name, Slot: ks.slot.Load(), Refused: ks.refused.Load(),
				Lead: max(ks.vc.Load()-t, 0), Queued: ks.active.Load()})
		}
	}
	g.unlock()
	slices.SortFunc(top, func(a, b KeyStat) int {
		if c := cmp.Compare(b.Slot, a.Slot); c != 0 {
			return c
		}
		if c := cmp.Compare(b.Refused, a.Refused); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	if len(top) > n {
		top = top[:n]
	}
	return top, untracked
}

// ActiveKeys is the keys of every class with work in flight.
func (g *Granter) ActiveKeys() int32 {
	var n int32
	for c := range g.keys {
		n += g.keys[c].active.Load()
	}
	return n
}

// trackedKeys is the keys class c tracks (tests).
func (g *Granter) trackedKeys(c Class) int {
	g.lock()
	defer g.unlock()
	return len(g.keys[c].m)
}
