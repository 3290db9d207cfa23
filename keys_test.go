package cpuwork

import (
	"context"
	"encoding/binary"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Two keys flood one slot, one with 4 ms tasks and one with 1 ms tasks,
// four submitters each: without keys the slot goes round the submitters
// (FIFO) and the long tasks get four times the slot time of the short
// ones; with keys each key gets about half.
func TestKeysShareASlotByMeasuredSlotTime(t *testing.T) {
	for _, keyed := range []bool{false, true} {
		e := newExec(t, Options{Slots: 1})
		var wg sync.WaitGroup
		stop := time.Now().Add(400 * time.Millisecond)
		var slot [2]atomic.Int64
		for k, d := range []time.Duration{4 * time.Millisecond, time.Millisecond} {
			ctx := context.Background()
			if keyed {
				ctx = WithKey(ctx, []string{"long", "short"}[k])
			}
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for time.Now().Before(stop) {
						e.Do(ctx, Interactive, func(ctx context.Context) error {
							t0 := time.Now()
							spinChecked(ctx, d)
							slot[k].Add(int64(time.Since(t0)))
							return nil
						})
					}
				}()
			}
		}
		wg.Wait()
		ratio := float64(slot[0].Load()) / float64(slot[1].Load())
		t.Logf("keyed %v: long tasks' slot time %.2fx the short ones'", keyed, ratio)
		switch {
		case keyed && (ratio > 1.8 || ratio < 0.55):
			t.Errorf("keyed: the 4 ms key got %.2fx the 1 ms key's slot time, want about 1", ratio)
		case !keyed && ratio < 2.5:
			t.Errorf("without keys the 4 ms tasks got only %.2fx the 1 ms tasks' slot time: the case does not show unfairness", ratio)
		}
		if keyed {
			st := e.Stats()
			if len(st.Keys) != 2 || st.Keys[0].SlotTime <= 0 || st.Keys[1].SlotTime <= 0 {
				t.Errorf("Stats.Keys %+v: want both keys with their slot time", st.Keys)
			}
		}
	}
}

// A light key's task passes a flooding key's queue: with one slot held
// and the flood's six tasks queued behind it, the light key's task starts
// before all but at most the first of them (queued while the flood's
// clock had not yet run ahead); in arrival order it would start last.
// A key earns its share by being served from the queue: in the first
// round neither key has been, so both share the class's pool and the
// light task starts last, as without keys; from the second on it passes.
// The order is the queue's alone: every task is queued before the slot
// is let go, so the Go and OS schedulers cannot reorder it. The flood's
// tasks take 20 ms, so its lead (20 ms a queued task) exceeds any stall
// between their submission and the light task's.
func TestALightKeyPassesAFloodingKeysQueue(t *testing.T) {
	for _, keyed := range []bool{true, false} {
		task := time.Millisecond
		if keyed {
			task = 20 * time.Millisecond
		}
		e := newExec(t, Options{Slots: 1})
		flood, light := context.Background(), context.Background()
		if keyed {
			flood, light = WithKey(flood, "flood"), WithKey(light, "light")
		}
		// The flood has run before: its tasks' slot time is measured.
		for range 5 {
			e.Do(flood, Interactive, func(ctx context.Context) error {
				spinChecked(ctx, task)
				return nil
			})
		}
		for round := range 4 {
			gate := make(chan struct{})
			var wg sync.WaitGroup
			var mu sync.Mutex
			var order []string
			run := func(ctx context.Context, name string, f func()) {
				wg.Add(1)
				go func() {
					defer wg.Done()
					e.Do(ctx, Interactive, func(context.Context) error {
						mu.Lock()
						order = append(order, name)
						mu.Unlock()
						f()
						return nil
					})
				}()
			}
			queued := func(n int) func() bool {
				return func() bool { return e.Stats().Classes[Interactive].Queued == n }
			}
			run(flood, "hold", func() { <-gate })
			waitUntil(t, "the slot held", func() bool { return e.Stats().Classes[Interactive].Running == 1 })
			for range 6 {
				run(flood, "flood", func() { spin(task) })
			}
			waitUntil(t, "the flood queued", queued(6))
			run(light, "light", func() {})
			waitUntil(t, "the light task queued", queued(7))
			close(gate)
			wg.Wait()
			pos := slices.Index(order, "light") - 1 // after "hold"
			switch {
			case keyed && round == 0 && pos != 6:
				t.Fatalf("round 0: the light key's task started after %d of the flood's 6 queued tasks (%v); want 6: neither key has earned a share yet", pos, order)
			case keyed && round > 0 && pos > 1:
				t.Fatalf("round %d: the light key's task started after %d of the flood's 6 queued tasks (%v); want at most 1", round, pos, order)
			case !keyed && pos != 6:
				t.Fatalf("round %d without keys: the light task started after %d of 6 queued tasks (%v); want 6 (arrival order), else the case shows nothing", round, pos, order)
			}
		}
	}
}

// A key's bytes are not kept: 4,096 tasks, each with a distinct 1 MiB
// key, queued behind a held slot 64 at a time, leave the heap at most
// 16 MiB above where it was once they end (the table keeps a digest and
// a short prefix of each key). It stops at the first batch past the
// bound, so that keeping the keys whole fails fast.
func TestKeyMemoryIsBoundedInBytes(t *testing.T) {
	e := newExec(t, Options{Slots: 1})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	const keySize, batch = 1 << 20, 64
	buf := make([]byte, keySize)
	for b := range 4096 / batch {
		release := hold(t, e, 1)
		var wg sync.WaitGroup
		for i := range batch {
			binary.LittleEndian.PutUint64(buf, uint64(b*batch+i))
			ctx := WithKey(context.Background(), string(buf)) // a fresh 1 MiB string
			wg.Add(1)
			go func() {
				defer wg.Done()
				e.Do(ctx, Interactive, func(context.Context) error { return nil })
			}()
		}
		waitQueued(t, e, Interactive, batch)
		release()
		wg.Wait()
		runtime.GC()
		runtime.ReadMemStats(&after)
		if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 16<<20 {
			t.Fatalf("after %d tasks with distinct 1 MiB keys the heap is %d MiB above its start: want at most 16", (b+1)*batch, grew>>20)
		}
	}
	st := e.Stats()
	if len(st.Keys) == 0 {
		t.Fatal("Stats.Keys is empty: the keys were not tracked, the case shows nothing")
	}
	for _, k := range st.Keys {
		if len(k.Key) > 64 {
			t.Errorf("Stats.Keys reports a key of %d bytes: want at most 64 (a prefix and its digest)", len(k.Key))
		}
	}
}
