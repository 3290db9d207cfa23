package goroutine

import (
	"sync"
	"testing"
)

// grow makes the stack grow (the runtime copies it elsewhere) and
// returns the identity seen at the deepest frame.
func grow(depth int) uintptr {
	var pad [256]byte
	if depth == 0 {
		return ID() + uintptr(pad[0])
	}
	return grow(depth - 1)
}

// One goroutine keeps its identity, across a stack that moved; live
// goroutines never share one; none is 0.
func TestEveryLiveGoroutineHasItsOwnConstantIdentity(t *testing.T) {
	for _, tc := range []struct {
		name  string
		id    func() uintptr
		moves bool // check across a stack growth
	}{{"ID", ID, true}, {"the stack header", stackID, false}} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 200
			ids := make([]uintptr, n)
			var started, release sync.WaitGroup
			release.Add(1)
			var wg sync.WaitGroup
			for i := range n {
				started.Add(1)
				wg.Add(1)
				go func() {
					defer wg.Done()
					ids[i] = tc.id()
					started.Done()
					release.Wait() // all alive at once
					if tc.moves {
						if g := grow(2000); g != ids[i] {
							t.Errorf("goroutine %d: identity %#x after its stack grew, %#x before", i, g, ids[i])
						}
					}
					if again := tc.id(); again != ids[i] {
						t.Errorf("goroutine %d: identity %#x, then %#x", i, ids[i], again)
					}
				}()
			}
			started.Wait()
			release.Done()
			wg.Wait()
			seen := map[uintptr]int{}
			for i, id := range ids {
				if id == 0 {
					t.Fatalf("goroutine %d: identity 0", i)
				}
				if j, ok := seen[id]; ok {
					t.Fatalf("goroutines %d and %d, alive together, share identity %#x", j, i, id)
				}
				seen[id] = i
			}
		})
	}
}

func BenchmarkID(b *testing.B) {
	for b.Loop() {
		ID()
	}
}
