package cpuwork

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/cpuwork/cpuwork/internal/goroutine"
)

// The running table maps each goroutine that runs a task (fn of a Do, a
// Go task on its worker, a For helper's chunks) to that task, by the
// goroutine's identity (internal/goroutine). It is how fn can receive
// the caller's ctx unchanged (no context allocated per task) while
// Checkpoint finds the task to hand its slot over, and a Do or For
// called on the same goroutine finds the slot it already holds.
//
// An entry is claimed in the goroutine's bucket (4 entries, one cache
// line) with a CAS on its key and freed by storing 0. Only the goroutine
// that claimed an entry reads or writes its task pointer and its own
// record, so they are plain fields: the next claimer's CAS orders its
// accesses after the previous owner's freeing store. A goroutine nested
// in tasks of several executors has one entry, pointing to its innermost
// task, whose outer link leads to the others.
//
// Each entry carries a task record of its own, which a Do that takes a
// free slot at once uses while it runs (no pool round trip on the fast
// path); every other task has its record elsewhere (newRecord, a Task, a
// For helper) and is pointed to. A goroutine that finds its bucket full
// goes to an overflow map under a mutex, which the lookups of that
// bucket's goroutines then also read (only while it holds some).
const (
	bucketBits     = 7
	runningBuckets = 1 << bucketBits
	bucketEntries  = 4
)

// runningEntry is one goroutine's entry: its key g (0: free) and its
// innermost task t (written and read by its owner only).
type runningEntry struct {
	g atomic.Uintptr
	t *task
}

// runningBucket is one cache line of entries.
type runningBucket [bucketEntries]runningEntry

var running struct {
	buckets [runningBuckets]runningBucket
	over    [runningBuckets]atomic.Int32        // a bucket's goroutines in the overflow map
	own     [runningBuckets][bucketEntries]task // an entry's own record (its owner's)

	mu       sync.Mutex
	overflow map[uintptr]*task
}

// inOverflow is task.entry for a task whose goroutine's entry is in the
// overflow map.
const inOverflow = -1

func bucketIndex(g uintptr) uint32 {
	// Fibonacci hashing: g structures are a few hundred bytes apart, the
	// product's high bits spread them over the buckets.
	return uint32(uint64(g) * 0x9E3779B97F4A7C15 >> (64 - bucketBits))
}

// runningTask returns the innermost task the calling goroutine runs, or
// nil.
func runningTask() *task {
	t, _ := lookupRunning(goroutine.ID())
	return t
}

// lookupRunning returns goroutine g's innermost task and its entry's
// index in g's bucket (inOverflow in the map), or nil.
func lookupRunning(g uintptr) (*task, int32) {
	bi := bucketIndex(g)
	b := &running.buckets[bi]
	for i := range b {
		if b[i].g.Load() == g {
			return b[i].t, int32(i)
		}
	}
	if running.over[bi].Load() == 0 {
		return nil, 0
	}
	return lookupOverflow(bi, g)
}

// lookupOverflow is lookupRunning for a goroutine without an entry in
// its bucket bi, which has goroutines in the overflow map.
func lookupOverflow(bi uint32, g uintptr) (*task, int32) {
	running.mu.Lock()
	t := running.overflow[g]
	running.mu.Unlock()
	return t, inOverflow
}

// claimOwn claims an entry for goroutine g, which has none, and returns
// the entry's own record, reset to a task of class c of e submitted
// with ctx and registered as g's running task; nil when g's bucket is
// full. The record is the goroutine's until leave.
func claimOwn(g uintptr, ctx context.Context, e *Executor, c Class) *task {
	bi := bucketIndex(g)
	b := &running.buckets[bi]
	for i := range b {
		if b[i].g.Load() == 0 && b[i].g.CompareAndSwap(0, g) {
			t := &running.own[bi][i]
			t.reset(ctx, e, c)
			t.g, t.entry, t.entered = g, int32(i), true
			b[i].t = t
			return t
		}
	}
	return nil
}

// enter makes t the calling goroutine's innermost task until leave. The
// task the goroutine ran before (another executor's, or a task of e
// whose slot was lost) becomes t.outer; a goroutine that ran none gets a
// fresh entry, and t.outer is t.inherit: the tasks of a submitter that
// waits, holding their slots idle, while t runs on a worker or the
// critical lane (a Do of a class that runs on workers), so that a Do of
// their executor inside t runs on their slot as it would have on the
// submitter's goroutine.
func (t *task) enter() {
	g := goroutine.ID()
	t.g, t.entered = g, true
	outer, entry := lookupRunning(g)
	bi := bucketIndex(g)
	if outer != nil {
		t.outer, t.entry, t.pushed = outer, entry, true
		if entry == inOverflow {
			running.mu.Lock()
			running.overflow[g] = t
			running.mu.Unlock()
		} else {
			running.buckets[bi][entry].t = t
		}
		return
	}
	t.outer, t.pushed = t.inherit, false
	b := &running.buckets[bi]
	for i := range b {
		if b[i].g.Load() == 0 && b[i].g.CompareAndSwap(0, g) {
			b[i].t = t
			t.entry = int32(i)
			return
		}
	}
	running.mu.Lock()
	if running.overflow == nil {
		running.overflow = make(map[uintptr]*task)
	}
	running.overflow[g] = t
	running.over[bi].Add(1)
	running.mu.Unlock()
	t.entry = inOverflow
}

// leave ends t as the calling goroutine's innermost task: the task it
// was pushed on becomes the innermost again, or the goroutine's entry is
// freed. It is the last use of an entry's own record: another goroutine
// may claim it at once.
func (t *task) leave() {
	g, outer, pushed := t.g, t.outer, t.pushed
	t.outer, t.g, t.entered, t.pushed = nil, 0, false, false
	bi := bucketIndex(g)
	if t.entry == inOverflow {
		running.mu.Lock()
		if pushed {
			running.overflow[g] = outer
		} else {
			delete(running.overflow, g)
			running.over[bi].Add(-1)
		}
		running.mu.Unlock()
		return
	}
	en := &running.buckets[bi][t.entry]
	if pushed {
		en.t = outer
		return
	}
	en.t = nil
	en.g.Store(0)
}

// of returns the innermost task of e among t and its outer tasks, or nil.
func (t *task) of(e *Executor) *task {
	for ; t != nil; t = t.outer {
		if t.e == e {
			return t
		}
	}
	return nil
}

// holding returns the task of e the calling goroutine runs (its
// innermost one of e), or nil.
func (e *Executor) holding() *task { return runningTask().of(e) }
