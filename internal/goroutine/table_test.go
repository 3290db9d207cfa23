package goroutine

import (
	"sync"
	"testing"
)

type rec struct{ n int }

// Goroutines of one bucket beyond its four entries go to the overflow
// map; each finds its own T, nested Enters stack and unstack, and every
// entry is free once all left.
func TestTableEntriesOverflowAndNest(t *testing.T) {
	var tb Table[rec]
	// Keys that all land in one bucket: search for them.
	var keys []uintptr
	want := bucketIndex(1)
	for g := uintptr(1); len(keys) < 3*bucketEntries; g++ {
		if bucketIndex(g) == want {
			keys = append(keys, g)
		}
	}
	outers := make([]*rec, len(keys))
	idx := make([]int32, len(keys))
	for i, g := range keys {
		if i%2 == 0 {
			if r, j := tb.ClaimOwn(g); r != nil {
				r.n, outers[i], idx[i] = i, r, j
				continue
			}
		}
		r := &rec{n: i}
		if old, j := tb.Enter(g, r); old != nil {
			t.Fatalf("key %d had a T before entering", i)
		} else {
			outers[i], idx[i] = r, j
		}
	}
	if n := tb.Held(); n != len(keys) {
		t.Fatalf("held %d, want %d", n, len(keys))
	}
	for i, g := range keys {
		if r, _ := tb.Lookup(g); r != outers[i] || r.n != i {
			t.Fatalf("key %d found %+v", i, r)
		}
		inner := &rec{n: -i}
		old, j := tb.Enter(g, inner)
		if old != outers[i] || j != idx[i] {
			t.Fatalf("key %d: nested Enter returned %+v at %d, want %+v at %d", i, old, j, outers[i], idx[i])
		}
		if r, _ := tb.Lookup(g); r != inner {
			t.Fatalf("key %d: the nested T is not current", i)
		}
		tb.Leave(g, j, old)
		if r, _ := tb.Lookup(g); r != outers[i] {
			t.Fatalf("key %d: the outer T is not current again", i)
		}
	}
	if idx[len(keys)-1] != InOverflow {
		t.Fatal("twelve keys of one bucket and none in the overflow map")
	}
	for i, g := range keys {
		tb.Leave(g, idx[i], nil)
		if r, _ := tb.Lookup(g); r != nil {
			t.Fatalf("key %d still has a T after leaving", i)
		}
	}
	if n := tb.Held(); n != 0 {
		t.Fatalf("%d entries held after every key left", n)
	}
}

// Goroutines claim and free entries concurrently: each sees only its own.
func TestTableConcurrentGoroutines(t *testing.T) {
	var tb Table[rec]
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			g := ID()
			for range 1000 {
				r, j := tb.ClaimOwn(g)
				if r == nil {
					r = &rec{}
					_, j = tb.Enter(g, r)
				}
				r.n = i
				if got, _ := tb.Lookup(g); got != r || got.n != i {
					t.Errorf("goroutine %d found another's T", i)
					return
				}
				tb.Leave(g, j, nil)
			}
		})
	}
	wg.Wait()
	if n := tb.Held(); n != 0 {
		t.Fatalf("%d entries held after every goroutine left", n)
	}
}

// LookupOrClaim finds a goroutine's T where it has one (in its bucket or
// the overflow map) and claims none; where it has none, it claims an
// entry's own record while the bucket has room, and nothing once it is
// full.
func TestLookupOrClaimFindsOrClaimsInOnePass(t *testing.T) {
	var tb Table[rec]
	var keys []uintptr
	want := bucketIndex(1)
	for g := uintptr(1); len(keys) < bucketEntries+2; g++ {
		if bucketIndex(g) == want {
			keys = append(keys, g)
		}
	}
	for i, g := range keys[:bucketEntries] {
		cur, own, j := tb.LookupOrClaim(g)
		if cur != nil || own == nil || j != int32(i) {
			t.Fatalf("key %d, bucket not full: cur %v own %v at %d; want a claim at %d", i, cur, own, j, i)
		}
		own.n = i
	}
	over := &rec{n: 99}
	if _, j := tb.Enter(keys[bucketEntries], over); j != InOverflow {
		t.Fatalf("a fifth key of a full bucket entered at %d, want the overflow map", j)
	}
	for i, g := range keys[:bucketEntries] {
		if cur, own, j := tb.LookupOrClaim(g); cur == nil || cur.n != i || own != nil || j != int32(i) {
			t.Fatalf("key %d, held: cur %v own %v at %d; want its own T and no claim", i, cur, own, j)
		}
	}
	if cur, own, j := tb.LookupOrClaim(keys[bucketEntries]); cur != over || own != nil || j != InOverflow {
		t.Fatalf("the key in the overflow map: cur %v own %v at %d", cur, own, j)
	}
	if cur, own, _ := tb.LookupOrClaim(keys[bucketEntries+1]); cur != nil || own != nil {
		t.Fatalf("a key of a full bucket with no entry: cur %v own %v, want neither", cur, own)
	}
	tb.Leave(keys[1], 1, nil)
	if cur, own, j := tb.LookupOrClaim(keys[bucketEntries+1]); cur != nil || own == nil || j != 1 {
		t.Fatalf("after an entry was freed: cur %v own %v at %d, want a claim at 1", cur, own, j)
	}
}
