// Package goroutine holds what the executor reads of the running
// goroutine outside the Go API: an identity, a number that no other live
// goroutine has at the same time, so that state can be kept per
// goroutine (the executor's table of the tasks its goroutines run)
// without a context to carry it, and its profiler labels (ProfLabels).
// Each is kept because it buys more than 10 ns per task: carried in a
// context, a task would cost every Do a context.WithValue (an
// allocation) and every Checkpoint a lookup up the ctx it is given
// (BenchmarkIdentity* in the executor's package).
//
// Where the gc toolchain keeps the running goroutine's g in a register
// or the thread-local slot (386, amd64, arm, arm64, loong64, mips,
// mips64, ppc64, riscv64, s390x, with their endian variants), the
// identity is the address of that g, read in assembly: one load, about
// a nanosecond with the call. A g structure never moves (the garbage
// collector does not move heap objects; stacks move, g does not) and
// lives as long as its goroutine, so the address is constant for a
// goroutine's life; after the goroutine exits the runtime may give the
// same structure to a new goroutine, so an identity is unique among live
// goroutines only. Elsewhere (wasm, gccgo) it is the goroutine's ID
// parsed from the first line of runtime.Stack, about a microsecond.
package goroutine

import (
	"context"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"unsafe"
)

// ID returns the calling goroutine's identity: never 0, equal for every
// call on one goroutine, and different from every other live goroutine's.
func ID() uintptr { return id() }

// stackID is ID's portable form: the goroutine's ID from the header of
// its stack trace ("goroutine 42 [running]:"), parsed without an
// allocation.
func stackID() uintptr {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	const prefix = "goroutine "
	if len(b) <= len(prefix) || string(b[:len(prefix)]) != prefix {
		panic("goroutine: unexpected stack header " + strconv.Quote(string(b)))
	}
	var id uintptr
	for _, c := range b[len(prefix):] {
		if c < '0' || c > '9' {
			break
		}
		id = id*10 + uintptr(c-'0')
	}
	if id == 0 {
		panic("goroutine: unexpected stack header " + strconv.Quote(string(b)))
	}
	return id
}

// ProfLabels returns the calling goroutine's profiler label set (nil:
// none), and SetProfLabels replaces it, through the two hooks
// runtime/pprof itself uses (runtime_getProfLabel and
// runtime_setProfLabel in runtime/proflabel.go, which the Go project
// keeps for the packages that link to them). They are here, beside the
// goroutine's identity, because they buy the executor what its public
// API cannot: runtime/pprof cannot read a goroutine's labels, so putting
// them back after a task would mean carrying the submitter's labels in
// a context and asking whether that context has any (a walk of its
// whole chain) on every task; a task's labels through the hooks are a
// load and two stores of a precomputed set (BenchmarkIdentityLabels* in
// the executor's package measure both).
func ProfLabels() unsafe.Pointer { return getProfLabel() }

// SetProfLabels makes labels (a set ProfLabels returned) the calling
// goroutine's profiler labels.
func SetProfLabels(labels unsafe.Pointer) { setProfLabel(labels) }

//go:linkname getProfLabel runtime/pprof.runtime_getProfLabel
func getProfLabel() unsafe.Pointer

//go:linkname setProfLabel runtime/pprof.runtime_setProfLabel
func setProfLabel(labels unsafe.Pointer)

// LabelSet returns the label set of a context with the one label
// key=value, as the goroutine holds it, for TaskLabels.
func LabelSet(key, value string) unsafe.Pointer {
	old := getProfLabel()
	pprof.SetGoroutineLabels(pprof.WithLabels(context.Background(), pprof.Labels(key, value)))
	set := getProfLabel()
	setProfLabel(old)
	return set
}

// TaskLabels gives the calling goroutine, about to run a task submitted
// with ctx, the task's labels; old is the goroutine's labels before it
// (ProfLabels), returned as the set to put back after it. On the
// submitter's goroutine (onCaller) the labels are the goroutine's: when
// it has none (old nil), set (LabelSet(key, value)) alone — a caller may
// make that SetProfLabels(set) call itself — else ctx's plus key=value
// (pprof.Do sets both the same; one allocation). Elsewhere (a worker)
// they are ctx's plus key=value, set alone when ctx has none.
func TaskLabels(old unsafe.Pointer, ctx context.Context, set unsafe.Pointer, onCaller bool, key, value string) (restore unsafe.Pointer) {
	if onCaller && old == nil || !onCaller && !HasLabels(ctx) {
		setProfLabel(set)
		return old
	}
	pprof.SetGoroutineLabels(pprof.WithLabels(ctx, pprof.Labels(key, value)))
	return old
}

// HasLabels reports whether ctx carries profiler labels.
func HasLabels(ctx context.Context) bool {
	has := false
	pprof.ForLabels(ctx, func(string, string) bool { has = true; return false })
	return has
}

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

// LookupOrClaim is Lookup and, when g has no entry, ClaimOwn, in one
// pass over g's bucket: cur is g's T (nil: none); own, when g had none
// and its bucket had room, the claimed entry's own record (nil
// otherwise), and i its index. Only g itself may call it.
func (tb *Table[T]) LookupOrClaim(g uintptr) (cur, own *T, i int32) {
	bi := bucketIndex(g)
	b := &tb.buckets[bi]
	free := -1
	for k := range b {
		switch b[k].g.Load() {
		case g:
			return (*T)(b[k].t), nil, int32(k)
		case 0:
			if free < 0 {
				free = k
			}
		}
	}
	if tb.over[bi].Load() != 0 {
		if p, j := tb.lookupRest(g); p != nil {
			return (*T)(p), nil, j
		}
	}
	if free >= 0 && b[free].g.CompareAndSwap(0, g) {
		t := &tb.own[bi][free]
		b[free].t = unsafe.Pointer(t)
		return nil, t, int32(free)
	}
	own, i = tb.ClaimOwn(g) // another goroutine took the free entry first
	return nil, own, i
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
	if outer == nil && index != InOverflow {
		tb.free(&tb.buckets[bucketIndex(g)][index]) // the common case, in line
		return
	}
	tb.leave(g, index, unsafe.Pointer(outer))
}

// free frees entry en, held by the calling goroutine.
func (x *index) free(en *entry) {
	en.t = nil
	en.g.Store(0)
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
	x.free(en)
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
