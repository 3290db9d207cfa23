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
