package cpuwork

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestForCoversEveryIndexOnceAndUsesFreeSlots(t *testing.T) {
	e := newExec(t, Options{Slots: 4})
	const n = 5000
	seen := make([]atomic.Int32, n)
	var goroutines sync.Map
	var distinct atomic.Int32
	err := e.For(context.Background(), Interactive, n, func(lo, hi int) error {
		if lo < 0 || hi > n || lo >= hi {
			return fmt.Errorf("bad chunk [%d,%d)", lo, hi)
		}
		if _, loaded := goroutines.LoadOrStore(goid(), true); !loaded {
			distinct.Add(1)
		}
		// Past the probe (which covers well under 1000 indexes), hold this
		// chunk until a helper on another free slot has joined: For must
		// recruit one. Bounded so a regression fails instead of hanging.
		if lo >= 1000 {
			deadline := time.Now().Add(10 * time.Second)
			for distinct.Load() < 2 && time.Now().Before(deadline) {
				time.Sleep(100 * time.Microsecond)
			}
		}
		for i := lo; i < hi; i++ {
			seen[i].Add(1)
			spin(2 * time.Microsecond)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range seen {
		if seen[i].Load() != 1 {
			t.Fatalf("index %d ran %d times", i, seen[i].Load())
		}
	}
	if distinct.Load() < 2 {
		t.Error("no helper goroutine joined the loop although 3 slots were free")
	}
	if e.Stats().Free != 4 {
		t.Errorf("For leaked slots: free %d", e.Stats().Free)
	}
}

func TestForStopsAtTheFirstErrorAndRecoversPanics(t *testing.T) {
	e := newExec(t, Options{Slots: 2})
	boom := errors.New("boom")
	var after atomic.Int64
	err := e.For(context.Background(), Batch, 100000, func(lo, hi int) error {
		if lo > 500 {
			after.Add(1)
			return boom
		}
		spin(time.Duration(hi-lo) * time.Microsecond)
		return nil
	})
	if !errors.Is(err, boom) {
		t.Errorf("err %v", err)
	}
	if after.Load() > 4 {
		t.Errorf("%d chunks ran after the first error", after.Load())
	}
	err = e.For(context.Background(), Interactive, 10, func(lo, hi int) error { panic("in chunk") })
	var pe *PanicError
	if !errors.As(err, &pe) {
		t.Errorf("panic: %v", err)
	}
}

// A loop of a few long indexes (inference over a batch of images) that
// starts while the other slot is busy must pick that slot up once it is
// free: helpers were recruited only once, after the first chunk, so the
// whole batch ran on the caller's slot one image after another.
func TestForRecruitsASlotFreedWhileItRuns(t *testing.T) {
	e := newExec(t, Options{Slots: 2})
	ctx := context.Background()
	gate := make(chan struct{})
	busy := make(chan struct{})
	go e.Do(ctx, Interactive, func(context.Context) error { close(busy); <-gate; return nil })
	<-busy
	var caller atomic.Value // the goroutine of the probe, index 0: the loop's caller
	var onHelper atomic.Int32
	err := e.For(ctx, Batch, 8, func(lo, hi int) error {
		if lo == 0 {
			caller.Store(goroutineID())
		}
		if lo == 1 {
			close(gate) // the other slot frees while index 1 runs
		}
		time.Sleep(5 * time.Millisecond)
		if goroutineID() != caller.Load() {
			onHelper.Add(int32(hi - lo))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if onHelper.Load() == 0 {
		t.Error("no index ran on the slot freed during the loop")
	}
}
