package admission

import (
	"cmp"
	"context"
	"hash/maphash"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// Fair shares across keys inside a class (WithKey: a tenant, an API key,
// a client). A class's slots are shared across its sharers — its keys
// that have earned a share, and one pool — by measured slot time, with a
// virtual clock per sharer (Zhang's VirtualClock, SIGCOMM 1990, one
// level below the class shares of order.go):
//
//   - a key earns a share of its own once one of its tasks has been
//     served from the queue (held a slot after queuing); until then its
//     tasks are charged to the class's pool, with the tasks that carry
//     no key (once any task of the class has carried one). A client that
//     sends each request under a new key is one sharer, the pool, however
//     many keys it makes up: fresh keys cannot be multiplied into shares;
//   - the sharers are those with a task queued or running: a task that
//     queues charges its sharer's clock with its expected run time at
//     the sharer's share of the slots (run time × sharers / slots):
//     vc = max(now, vc) + charge; when it ends the charge is put right
//     by its measured slot time, and a task that never ran (refused,
//     cancelled, closed out) gives its charge back;
//   - a sharer's lead, how far its clock runs ahead of now, is how far
//     past its share it is; the task is ranked at its due plus that lead
//     (Waiter.Rank), so a sharer within its share keeps its place in the
//     due order and one past it queues behind every task that arrives
//     within its lead after it. The lead is capped at keyLeadMax: a key
//     that was alone and used the whole class is back to an even footing
//     within keyLeadMax once others compete, and no task waits forever;
//   - the door estimates a task's wait from the work ranked ahead of it,
//     so when the class sheds, tasks of sharers past their share, which
//     see more work ahead, are refused first; and while another sharer
//     has work in flight, a shedding class's tests of its standing queue
//     and its backlog (door.go, with an objective's target) spare the
//     tasks of a sharer within its share (a lead of at most keyPastLead
//     at its arrival): the queue stands because of the sharers past
//     theirs. With one sharer in flight the queue is its own and sheds
//     as any; the latency target still refuses any task that cannot
//     meet it;
//   - a task that finds a free slot with nobody queued is not charged: a
//     key's share matters only while tasks queue, and the fast path never
//     reads the key.
//
// Memory: each class tracks at most keyTableMax keys, each by a 64-bit
// digest of its string (maphash, seeded per class) and at most
// keyNameMax bytes of it for Stats: a key's own bytes are never kept.
// An earned key with a task queued or running is never dropped (the
// heavy hitters are tracked exactly); a full table is swept once for
// keys with nothing in flight (those that earned nothing first, then the
// least slot time), and when a sweep frees nothing, new keys are
// charged to the pool untracked until keyTableMax/4 more have come: an
// arrival's cost is one hash and one map look-up, a sweep's amortized.

// keyLeadMax caps a sharer's lead; keyPastLead is the lead past which a
// sharer is taken as past its share for the door's hold (keySpared): a
// key that floods reaches the cap within seconds, while one within its
// share only passes a task's charge now and then (a 500 ms request of
// one of ten keys on two slots charges 2.5 s); keyTableMax is the keys
// tracked per class; keyNameMax the bytes of a key's string kept.
const (
	keyLeadMax  = int64(10 * time.Second)
	keyPastLead = keyLeadMax / 2
	keyTableMax = 4096
	keyNameMax  = 64
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

// keyState is one sharer of a class (an earned key, or the pool) or a
// tracked key that has not earned a share yet. The table's map is
// guarded by the Granter's mu; the counters are atomics, since a task's
// end charges them without the lock. active goes from 0 to 1 only under
// mu.
type keyState struct {
	name    string        // at most keyNameMax bytes of the key, and its digest when cut
	vc      atomic.Int64  // virtual clock, g.now() ns (a sharer's)
	active  atomic.Int32  // its tasks queued or running (a sharer's)
	slot    atomic.Int64  // measured slot time of its tasks that queued, ns
	refused atomic.Uint64 // its tasks refused (door, head, backlog)
	earned  atomic.Bool   // one of its tasks was served from the queue
}

// keyTable is one class's tracked keys and its pool.
type keyTable struct {
	m    map[uint64]*keyState // by digest; guarded by mu
	seed maphash.Seed
	// pool is the sharer of the tasks whose key has not earned a share
	// (or is untracked) and, once inUse, of the tasks without a key.
	pool  keyState
	inUse bool // a task of the class carried a key (under mu)
	// active is the sharers with active > 0.
	active atomic.Int32
	// untracked counts the keyed tasks charged to the pool because the
	// table was full; sweepIn the new keys to wait before sweeping a
	// full table again (under mu).
	untracked atomic.Uint64
	sweepIn   int
}

// keyName is what of key a table keeps: a copy of key itself when it is
// valid UTF-8 of at most keyNameMax bytes, else its first bytes (cut at
// a rune's start, each run of bytes that are not UTF-8 as "?") and its
// digest: a valid label value, unique per digest, that holds nothing of
// key's memory.
func keyName(key string, h uint64) string {
	if len(key) <= keyNameMax && utf8.ValidString(key) {
		return strings.Clone(key)
	}
	n := min(len(key), keyNameMax-len("…#")-16) // 16: the digest in hex
	for n > 0 && n < len(key) && !utf8.RuneStart(key[n]) {
		n--
	}
	return strings.ToValidUTF8(key[:n], "?") + "…#" + strconv.FormatUint(h, 16)
}

// entryLocked returns key's entry (lookupLocked by its digest).
func (kt *keyTable) entryLocked(key string, t int64) *keyState {
	if kt.m == nil {
		kt.m = make(map[uint64]*keyState)
		kt.seed = maphash.MakeSeed()
	}
	return kt.lookupLocked(maphash.String(kt.seed, key), key, t)
}

// lookupLocked returns the entry of the key with digest h (name its
// string), adding it if there is room; nil when the table is full and
// no sweep may free a place now.
func (kt *keyTable) lookupLocked(h uint64, name string, t int64) *keyState {
	if ks, ok := kt.m[h]; ok {
		return ks
	}
	if len(kt.m) >= keyTableMax {
		if kt.sweepIn > 0 {
			kt.sweepIn--
			return nil
		}
		kt.sweepLocked(t)
		if len(kt.m) >= keyTableMax {
			kt.sweepIn = keyTableMax / 4
			return nil
		}
	}
	ks := &keyState{name: keyName(name, h)}
	ks.vc.Store(t)
	kt.m[h] = ks
	return ks
}

// sweepLocked makes room in a full table by dropping keys with nothing
// in flight, down to three quarters of keyTableMax where it can: those
// that never earned a share first (they hold figures only), then earned
// ones whose lead has run out before those still ahead, least slot time
// first (the heavy hitters' figures are kept for Stats). One walk of
// the map and a sort of the idle earned keys.
func (kt *keyTable) sweepLocked(t int64) {
	type idle struct {
		h     uint64
		ahead bool
		slot  int64
	}
	var earned []idle
	for h, ks := range kt.m {
		switch {
		case ks.active.Load() > 0:
		case !ks.earned.Load():
			delete(kt.m, h)
		default:
			earned = append(earned, idle{h, ks.vc.Load() > t, ks.slot.Load()})
		}
	}
	slices.SortFunc(earned, func(a, b idle) int {
		if a.ahead != b.ahead {
			if a.ahead {
				return 1
			}
			return -1
		}
		return cmp.Compare(a.slot, b.slot)
	})
	for _, k := range earned {
		if len(kt.m) <= keyTableMax*3/4 {
			return
		}
		delete(kt.m, k.h)
	}
}

// keyRankLocked finds w's sharer (name, read from its ctx before the
// lock; ok false: none) and ranks w: its due plus its sharer's lead (at
// most keyLeadMax); at its due when no task of the class has carried a
// key. The sharer is charged once w passes the door (keyChargeLocked).
func (g *Granter) keyRankLocked(name string, ok bool, w *Waiter, t int64) {
	w.rank = w.due
	kt := &g.keys[w.class]
	ks := &kt.pool
	switch {
	case ok:
		kt.inUse = true
		e := kt.entryLocked(name, t)
		switch {
		case e == nil:
			kt.untracked.Add(1)
		case e.earned.Load():
			ks = e
		default:
			w.entry = e
		}
	case !kt.inUse:
		return
	}
	w.key = ks
	lead := ks.vc.Load() - t
	if lead > 0 {
		w.rank = addSat(w.due, min(lead, keyLeadMax))
	}
	w.keyPast = lead > keyPastLead
}

// keySpared reports whether a shedding class's standing-queue and
// backlog tests spare w: its sharer was within its share when it arrived
// and another sharer has work in flight (door.go).
func (g *Granter) keySpared(w *Waiter) bool {
	if w.key == nil || w.keyPast {
		return false
	}
	others := g.keys[w.class].active.Load()
	if w.key.active.Load() > 0 {
		others--
	}
	return others > 0
}

// addSat is a+b, saturated at the int64 range (b >= 0).
func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// keyRate is the clock time one ns of slot time costs a sharer of class
// c: the sharers with work in flight over the slots that serve the
// queue.
func (g *Granter) keyRate(c Class) float64 {
	return float64(max(g.keys[c].active.Load(), 1)) / g.serviceSlots()
}

// expectedSlot is what w's task is expected to hold its slot for: its
// expected run time, else its class's last measured slot time, else
// 1 ms (as a grant's estimate).
func (g *Granter) expectedSlot(w *Waiter) int64 {
	if x := g.serviceOf(w); x > 0 {
		return x
	}
	if x := g.share.lastSlot[w.class].Load(); x > 0 {
		return x
	}
	return int64(time.Millisecond)
}

// keyChargeLocked charges w's sharer, w having passed the door: one more
// task in flight, and its expected slot time at the sharer's share.
func (g *Granter) keyChargeLocked(w *Waiter, t int64) {
	ks := w.key
	if ks == nil {
		return
	}
	kt := &g.keys[w.class]
	if ks.active.Add(1) == 1 {
		kt.active.Add(1)
	}
	w.keyCharge = int64(float64(g.expectedSlot(w)) * g.keyRate(w.class))
	ks.vc.Store(min(max(ks.vc.Load(), t)+w.keyCharge, t+keyLeadMax))
}

// keyRefused counts a refusal of w against its key.
func keyRefused(w *Waiter) {
	switch {
	case w.entry != nil:
		w.entry.refused.Add(1)
	case w.key != nil:
		w.key.refused.Add(1)
	}
}

// keyUnrank forgets w's sharer, w refused before it was charged.
func keyUnrank(w *Waiter) { w.key, w.entry = nil, nil }

// keyRan charges w's sharer, of class c, with a measured slot period of
// d ns of w's task (Record), at the sharer's share; a key that had
// not earned a share has earned it. Without the lock.
func (g *Granter) keyRan(w *Waiter, c Class, d int64) {
	if e := w.entry; e != nil {
		e.slot.Add(d)
		e.earned.Store(true)
	}
	ks := w.key
	if ks != &g.keys[c].pool || w.entry == nil {
		ks.slot.Add(d)
	}
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

// keyDone ends w's charge to its sharer when its task ends for good: the
// expected slot time charged when it passed the door goes back, since
// its measured slot periods were charged instead (Record), or, if it
// never ran, it never used any. Without the lock; every path that ends
// a charged task calls it once, after its last Record.
func (g *Granter) keyDone(w *Waiter) {
	ks := w.key
	if ks == nil {
		return
	}
	w.key, w.entry = nil, nil
	if w.keyCharge != 0 {
		ks.advance(-w.keyCharge, g.now())
		w.keyCharge = 0
	}
	kt := &g.keys[w.class]
	if ks.active.Add(-1) == 0 {
		kt.active.Add(-1)
	}
}

// Keyed reports whether w's task is charged to a sharer (it is timed, so
// that its end can charge its measured slot time).
func (w *Waiter) Keyed() bool { return w.key != nil }

// KeyStat is one tracked key's figures (Snapshot).
type KeyStat struct {
	Class   Class
	Name    string // at most keyNameMax bytes of the key, and its digest when cut
	Slot    int64  // measured slot time of its tasks that queued, ns
	Refused uint64
	Lead    int64 // how far past its share, ns (0: within it, or not yet earned)
	Queued  int32 // its tasks queued or running, once it earned a share
}

// topKeys returns up to n tracked keys of every class with the most slot
// time, then refusals, most first; and the tasks queued untracked.
func (g *Granter) topKeys(n int) (top []KeyStat, untracked uint64) {
	t := g.now()
	g.lock()
	for c := range g.keys {
		kt := &g.keys[c]
		untracked += kt.untracked.Load()
		for _, ks := range kt.m {
			if ks.slot.Load() == 0 && ks.refused.Load() == 0 && ks.active.Load() == 0 {
				continue // looked up, nothing to report yet
			}
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

// activeKeys is the sharers of every class with work in flight (earned
// keys, and each class's pool).
func (g *Granter) activeKeys() int32 {
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
