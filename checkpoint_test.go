package cpuwork

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestCheckpointHandsTheSlotToCriticalWork(t *testing.T) {
	e := newExec(t, Options{Slots: 1})
	stop := make(chan struct{})
	batchDone := make(chan error)
	var yields atomic.Int64
	go func() {
		batchDone <- e.Do(context.Background(), Batch, func(ctx context.Context) error {
			for {
				select {
				case <-stop:
					return nil
				default:
				}
				if err := Checkpoint(ctx); err != nil {
					return err
				}
				yields.Add(1)
			}
		})
	}()
	for e.Stats().Classes[Batch].Running == 0 {
		time.Sleep(100 * time.Microsecond)
	}
	// With the only slot held by a Batch loop that never returns, a
	// Critical task runs only if the loop's Checkpoint hands the slot over.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.Do(ctx, Critical, func(context.Context) error { return nil }); err != nil {
		t.Fatalf("critical task: %v", err)
	}
	close(stop)
	if err := <-batchDone; err != nil {
		t.Fatal(err)
	}
	if y := e.Stats().Classes[Batch].Yields; y < 1 {
		t.Errorf("yields %d", y)
	}
}

func TestCheckpointReportsContextEnd(t *testing.T) {
	e := newExec(t, Options{Slots: 1})
	ctx, cancel := context.WithCancel(context.Background())
	err := e.Do(ctx, Interactive, func(ctx context.Context) error {
		cancel()
		for range 10_000_000 {
			if err := Checkpoint(ctx); err != nil {
				return err
			}
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err %v", err)
	}
	if err := Checkpoint(context.Background()); err != nil {
		t.Errorf("outside a task: %v", err)
	}
}

func TestCheckpointYieldSetsTheClockGaps(t *testing.T) {
	for _, c := range []struct {
		in                           time.Duration
		yield, after, minGap, maxGap time.Duration
	}{
		// The default: the clock read every 10-20 µs, a yield at the
		// first read 30 µs after the last: 30-50 µs apart, 40 on average.
		{0, defaultCheckpointYield, 30 * time.Microsecond, 10 * time.Microsecond, 20 * time.Microsecond},
		{50 * time.Microsecond, 50 * time.Microsecond, 37500 * time.Nanosecond, 12500 * time.Nanosecond, 25 * time.Microsecond},
		{200 * time.Microsecond, 200 * time.Microsecond, 150 * time.Microsecond, 50 * time.Microsecond, 100 * time.Microsecond},
		{-1, 0, 0, 50 * time.Microsecond, 100 * time.Microsecond},
		{time.Nanosecond, time.Nanosecond, time.Nanosecond, 500 * time.Nanosecond, time.Microsecond},
	} {
		var e Executor
		e.setCheckpointYield(c.in)
		if time.Duration(e.yieldGap) != c.yield || time.Duration(e.yieldAfter) != c.after ||
			time.Duration(e.checkMin) != c.minGap || time.Duration(e.checkMax) != c.maxGap {
			t.Errorf("checkpointYield %v: yield %v after %v, clock read every %v..%v; want %v after %v, %v..%v", c.in,
				time.Duration(e.yieldGap), time.Duration(e.yieldAfter), time.Duration(e.checkMin), time.Duration(e.checkMax),
				c.yield, c.after, c.minGap, c.maxGap)
		}
	}
}

// Checkpoint called with the enclosing task's context from For's chunk
// callbacks runs on several goroutines at once: it must be safe (run with
// -race) and never hand the task's slot over from a helper.
func TestCheckpointFromForChunksIsSafe(t *testing.T) {
	e := newExec(t, Options{Slots: 3})
	stop := make(chan struct{})
	var helped atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // keeps a Critical task waiting now and then
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			time.Sleep(200 * time.Microsecond) // leaves slots free for For's helpers in between
			e.Do(context.Background(), Critical, func(context.Context) error { spin(20 * time.Microsecond); return nil })
		}
	}()
	for range 20 {
		err := e.Do(context.Background(), Batch, func(ctx context.Context) error {
			owner := goid()
			return e.For(ctx, Batch, 2000, func(lo, hi int) error {
				if goid() != owner {
					helped.Add(1)
				}
				for range hi - lo {
					if err := Checkpoint(ctx); err != nil {
						return err
					}
					spin(time.Microsecond)
				}
				return nil
			})
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	if helped.Load() == 0 {
		t.Fatal("no chunk ran on a helper: the test did not exercise concurrent Checkpoints")
	}
}

// A task whose Checkpoint lost its slot (its ctx ended while it was
// re-queued) and that keeps calling Checkpoint must not hand over a slot
// it no longer holds. Found by the stress test: one slot too many after
// Close.
func TestCheckpointAfterTheSlotWasLostGivesNothingBack(t *testing.T) {
	e := newExec(t, Options{Slots: 1})
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	critQueued := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- e.Do(ctx, Batch, func(ctx context.Context) error {
			close(started)
			<-critQueued
			cancel()
			var errs int
			for range 100 { // keeps calling Checkpoint after it failed
				if Checkpoint(ctx) != nil {
					errs++
				}
			}
			if errs != 100 {
				return errors.New("Checkpoint forgot that the slot was lost")
			}
			return nil
		})
	}()
	<-started
	critGate, critDone := queueCritical(t, e)
	close(critQueued)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	close(critGate)
	if err := <-critDone; err != nil {
		t.Fatal(err)
	}
	if st := e.Stats(); st.Free != st.Slots {
		t.Fatalf("%d of %d slots free after every task ended", st.Free, st.Slots)
	}
}

// New sets Checkpoint's clock: an executor from New yields its P every
// ~40 µs while every P is busy. (An executor that skipped it never yielded
// on the timer, and the timers scenario's canary waited 0.4 ms at p50
// behind its batch work instead of 27 µs: docs/raw/bench-default-seed2414.txt.)
func TestNewSetsTheDefaultCheckpointYield(t *testing.T) {
	e := newExec(t, Options{Slots: 1})
	if time.Duration(e.yieldGap) != defaultCheckpointYield || e.yieldAfter == 0 || e.checkMin == 0 || e.checkMax == 0 {
		t.Fatalf("an executor from New yields every %v (after %v, clock read every %v..%v); want every %v",
			time.Duration(e.yieldGap), time.Duration(e.yieldAfter), time.Duration(e.checkMin), time.Duration(e.checkMax), defaultCheckpointYield)
	}
	e = newExec(t, Options{Slots: 1, checkpointYield: 100 * time.Microsecond})
	if time.Duration(e.yieldGap) != 100*time.Microsecond {
		t.Fatalf("checkpointYield 100µs: New set %v", time.Duration(e.yieldGap))
	}
}

// A task's first Checkpoint yields the P when every P is busy: when the P
// last yielded is not known (the goroutine's previous task may have run
// up to a yield interval since its own yield), so a loop of short tasks
// yields as often as one long task. Holding its first yield for a whole
// interval from its start let a P run up to two intervals without one.
func TestATasksFirstCheckpointYieldsWhenEveryPIsBusy(t *testing.T) {
	var yields atomic.Int64
	defer func(f func()) { yieldP = f }(yieldP)
	yieldP = func() { yields.Add(1) }
	e := newExec(t, Options{Slots: 1, WatchInterval: -1})
	// Every P busy, nothing runnable, as if sampled just now and held so
	// however slowly the test runs; a fresh sample is taken afterwards.
	defer sampler.last.Store(0)
	for range 3 {
		sampler.busy.Store(true)
		sampler.runnable.Store(0)
		sampler.last.Store(now() + int64(time.Hour))
		if err := e.Do(context.Background(), Batch, func(ctx context.Context) error { return Checkpoint(ctx) }); err != nil {
			t.Fatal(err)
		}
	}
	if got := yields.Load(); got != 3 {
		t.Errorf("3 tasks' first Checkpoints with every P busy yielded %d times, want 3", got)
	}
}
