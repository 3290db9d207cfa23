package cpuwork

import (
	"context"
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

// A light key's tasks pass the flood's queue: with one slot and a key
// keeping six tasks queued, the light key's task starts after the one
// running (the median), not after the six.
func TestALightKeyPassesAFloodingKeysQueue(t *testing.T) {
	e := newExec(t, Options{Slots: 1})
	var started atomic.Int64
	flood := WithKey(context.Background(), "flood")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				e.Do(flood, Interactive, func(ctx context.Context) error {
					started.Add(1)
					spinChecked(ctx, time.Millisecond)
					return nil
				})
			}
		}()
	}
	waitUntil(t, "the flood queued", func() bool { return e.Stats().Classes[Interactive].Queued >= 4 })
	light := WithKey(context.Background(), "light")
	var passed []int64
	for range 20 {
		before := started.Load()
		e.Do(light, Interactive, func(context.Context) error {
			passed = append(passed, started.Load()-before)
			return nil
		})
		time.Sleep(2 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	// Between reading the count and queuing, the submitting goroutine
	// may wait for a P behind the flood's spinning ones: a few more starts
	// now and then are the Go scheduler's, not the queue's.
	sorted := slices.Sorted(slices.Values(passed))
	if med := sorted[len(sorted)/2]; med > 1 || sorted[len(sorted)-1] > 4 {
		t.Errorf("flood tasks started between a light task's submission and its start: %v; want a median of at most 1 (the running one) and never more than 4", passed)
	}
}
