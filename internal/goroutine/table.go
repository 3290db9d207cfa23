package goroutine

import (
	"sync"
	"sync/atomic"
	"unsafe"
)

// Table maps each live goroutine that has an entry to a *T, by the
// goroutine's identity (ID): the executor keeps there the innermost task a
// goroutine runs, so that fn receives its caller's ctx unchanged while
// Checkpoint and a nested Do find the task. The zero Table is ready.
//
// An entry is claimed in the goroutine's bucket (4 entries, one cache
// line) with a CAS on its key and freed by storing 0. Only the goroutine
// that claimed an entry reads or writes its pointer and its own record,
// so they are plain fields: the next claimer's CAS orders its accesses
// after the previous owner's freeing store. A goroutine that finds its
// bucket full goes to an overflow map under a mutex, which the lookups of
// that bucket's goroutines then also read (only while it holds some).
//
// Each entry carries a record of its own (Own), which the goroutine that
// holds the entry may use as its T until it frees the entry: no
// allocation for the T of the commonest case.
type Table[T any] struct {
	index
	own [tableBuckets][bucketEntries]T
}

// index is the Table's map from goroutines to their T's address; it is
// not generic, so that Lookup's first check inlines where it is called.
type index struct {
	buckets [tableBuckets]bucket
	over    [tableBuckets]atomic.Int32 // a bucket's goroutines in the overflow map

	mu       sync.Mutex
	overflow map[uintptr]unsafe.Pointer
}

const (
	bucketBits    = 7
	tableBuckets  = 1 << bucketBits
	bucketEntries = 4
)

// InOverflow is the entry index of a goroutine whose entry is in the
// overflow map.
const InOverflow = -1

// entry is one goroutine's entry: its key g (0: free) and its T's address
// (written and read by its owner only).
type entry struct {
	g atomic.Uintptr
	t unsafe.Pointer
}

// bucket is one cache line of entries.
type bucket [bucketEntries]entry

func bucketIndex(g uintptr) uint32 {
	// Fibonacci hashing: g structures are a few hundred bytes apart, the
	// product's high bits spread them over the buckets.
	return uint32(uint64(g) * 0x9E3779B97F4A7C15 >> (64 - bucketBits))
}

// Lookup returns goroutine g's T and its entry index (InOverflow in the
// map), or nil. Only g itself may call it for a non-nil answer to be
// current.
func (tb *Table[T]) Lookup(g uintptr) (*T, int32) {
	if p, ok := tb.first(g); ok {
		return (*T)(p), 0
	}
	p, i := tb.lookupRest(g)
	return (*T)(p), i
}

// First is Lookup's inlined first step: g's T when g holds the first
// entry of its bucket (where it most often is), ok false when Lookup must
// look further.
func (tb *Table[T]) First(g uintptr) (t *T, ok bool) {
	p, ok := tb.first(g)
	return (*T)(p), ok
}

func (x *index) first(g uintptr) (unsafe.Pointer, bool) {
	en := &x.buckets[bucketIndex(g)][0]
	if en.g.Load() != g {
		return nil, false // en.t is another goroutine's: not read
	}
	return en.t, true
}

// lookupRest is Lookup past the first entry of g's bucket.
func (x *index) lookupRest(g uintptr) (unsafe.Pointer, int32) {
	bi := bucketIndex(g)
	b := &x.buckets[bi]
	for i := 1; i < bucketEntries; i++ {
		if b[i].g.Load() == g {
			return b[i].t, int32(i)
		}
	}
	if x.over[bi].Load() == 0 {
		return nil, 0
	}
	x.mu.Lock()
	t := x.overflow[g]
	x.mu.Unlock()
	return t, InOverflow
}

// ClaimOwn claims an entry for goroutine g, which has none, pointing to
// the entry's own record, and returns that record and the entry's index;
// nil when g's bucket is full. The record keeps what its last user left
// in it; it is g's until Leave frees the entry.
func (tb *Table[T]) ClaimOwn(g uintptr) (*T, int32) {
	bi := bucketIndex(g)
	b := &tb.buckets[bi]
	for i := range b {
		if b[i].g.Load() == 0 && b[i].g.CompareAndSwap(0, g) {
			t := &tb.own[bi][i]
			b[i].t = unsafe.Pointer(t)
			return t, int32(i)
		}
	}
	return nil, 0
}

// Enter makes t goroutine g's T until Leave and returns the T it had
// before (nil when it had no entry: it gets one, in the overflow map if
// its bucket is full) and its entry's index.
func (tb *Table[T]) Enter(g uintptr, t *T) (outer *T, index int32) {
	p, i := tb.enter(g, unsafe.Pointer(t))
	return (*T)(p), i
}

func (x *index) enter(g uintptr, t unsafe.Pointer) (unsafe.Pointer, int32) {
	outer, ok := x.first(g)
	var i int32
	if !ok {
		outer, i = x.lookupRest(g)
	}
	bi := bucketIndex(g)
	if outer != nil {
		if i == InOverflow {
			x.mu.Lock()
			x.overflow[g] = t
			x.mu.Unlock()
		} else {
			x.buckets[bi][i].t = t
		}
		return outer, i
	}
	b := &x.buckets[bi]
	for i := range b {
		if b[i].g.Load() == 0 && b[i].g.CompareAndSwap(0, g) {
			b[i].t = t
			return nil, int32(i)
		}
	}
	x.mu.Lock()
	if x.overflow == nil {
		x.overflow = make(map[uintptr]unsafe.Pointer)
	}
	x.overflow[g] = t
	x.over[bi].Add(1)
	x.mu.Unlock()
	return nil, InOverflow
}

// Leave ends goroutine g's current T at entry index: outer, when not nil,
// becomes its T again (the one Enter returned); otherwise the entry is
// freed, and with it the entry's own record: another goroutine may claim
// both at once.
func (tb *Table[T]) Leave(g uintptr, index int32, outer *T) {
	tb.leave(g, index, unsafe.Pointer(outer))
}

func (x *index) leave(g uintptr, i int32, outer unsafe.Pointer) {
	bi := bucketIndex(g)
	if i == InOverflow {
		x.mu.Lock()
		if outer != nil {
			x.overflow[g] = outer
		} else {
			delete(x.overflow, g)
			x.over[bi].Add(-1)
		}
		x.mu.Unlock()
		return
	}
	en := &x.buckets[bi][i]
	if outer != nil {
		en.t = outer
		return
	}
	en.t = nil
	en.g.Store(0)
}

// Held counts the entries held, in buckets and in the overflow map (for
// tests: none once every goroutine left).
func (x *index) Held() int {
	n := 0
	for bi := range x.buckets {
		for i := range x.buckets[bi] {
			if x.buckets[bi][i].g.Load() != 0 {
				n++
			}
		}
		n += int(x.over[bi].Load())
	}
	return n
}
