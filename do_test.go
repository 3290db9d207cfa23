package cpuwork

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// goid returns the calling goroutine's ID from its stack header.
func goid() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	return strings.Fields(string(buf))[1] // "goroutine N [running]:"
}

func TestDoRunsOnTheCallersGoroutineWithLabels(t *testing.T) {
	e := newExec(t, Options{Slots: 2})
	caller := goid()
	for _, c := range []Class{Critical, Interactive} {
		err := e.Do(context.Background(), c, func(ctx context.Context) error {
			if id := goid(); id != caller {
				return fmt.Errorf("%s task ran on goroutine %s, caller is %s", c, id, caller)
			}
			// The goroutine profile (debug=1) prints each goroutine's labels.
			var buf bytes.Buffer
			pprof.Lookup("goroutine").WriteTo(&buf, 1)
			want := fmt.Sprintf(`"%s":"%s"`, labelKey, c)
			if !strings.Contains(buf.String(), want) {
				return fmt.Errorf("goroutine profile lacks label %s", want)
			}
			return nil
		})
		if err != nil {
			t.Error(err)
		}
	}
	// Batch runs on a worker, not on the caller.
	err := e.Do(context.Background(), Batch, func(context.Context) error {
		if goid() == caller {
			return errors.New("a Batch task ran on the caller's goroutine")
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	// Labels the caller set are kept alongside cpuwork's.
	pprof.Do(context.Background(), pprof.Labels("handler", "thumb"), func(ctx context.Context) {
		err := e.Do(ctx, Interactive, func(context.Context) error {
			var buf bytes.Buffer
			pprof.Lookup("goroutine").WriteTo(&buf, 1)
			if !strings.Contains(buf.String(), `"handler":"thumb"`) || !strings.Contains(buf.String(), `"cpuwork.class":"interactive"`) {
				return errors.New("merged labels missing from the goroutine profile")
			}
			return nil
		})
		if err != nil {
			t.Error(err)
		}
	})
}

func TestDoReturnsTheTasksError(t *testing.T) {
	e := newExec(t, Options{Slots: 1})
	boom := errors.New("boom")
	for c := range Class(numClasses) {
		if err := e.Do(context.Background(), c, func(context.Context) error { return boom }); err != boom {
			t.Errorf("%s: err %v", c, err)
		}
	}
	st := e.Stats()
	if st.Classes[Batch].Completed != 1 || st.Classes[Critical].Admitted != 1 {
		t.Errorf("stats %+v", st.Classes)
	}
}

func TestInvalidArgumentsAreErrors(t *testing.T) {
	e := newExec(t, Options{Slots: 1})
	ctx := context.Background()
	if err := e.Do(ctx, Class(9), func(context.Context) error { return nil }); err == nil {
		t.Error("invalid class accepted")
	}
	if err := e.Do(ctx, Batch, nil); err == nil {
		t.Error("nil fn accepted")
	}
	if _, err := e.Go(ctx, Class(7), func(context.Context) error { return nil }); err == nil {
		t.Error("Go: invalid class accepted")
	}
	if err := e.For(ctx, Batch, -1, func(int, int) error { return nil }); err == nil {
		t.Error("For: negative n accepted")
	}
	if err := e.SetSlots(0); err == nil {
		t.Error("SetSlots(0) accepted")
	}
}

func TestPanicBecomesAnErrorAndTheExecutorKeepsWorking(t *testing.T) {
	e := newExec(t, Options{Slots: 1})
	for _, c := range []Class{Interactive, Batch} {
		err := e.Do(context.Background(), c, func(context.Context) error { panic("kaboom") })
		var pe *PanicError
		if !errors.As(err, &pe) || pe.Value != "kaboom" || len(pe.Stack) == 0 || pe.Class != c {
			t.Fatalf("%s: err %v", c, err)
		}
	}
	sentinel := errors.New("wrapped")
	err := e.Do(context.Background(), Interactive, func(context.Context) error { panic(sentinel) })
	if !errors.Is(err, sentinel) {
		t.Errorf("panic(err) not unwrapped: %v", err)
	}
	if err := e.Do(context.Background(), Interactive, func(context.Context) error { return nil }); err != nil {
		t.Errorf("after panics: %v", err)
	}
	if p := e.Stats().Classes[Interactive].Panicked; p != 2 {
		t.Errorf("panicked %d", p)
	}
	if e.Stats().Free != 1 {
		t.Errorf("slot leaked by a panic: free %d", e.Stats().Free)
	}
}

func TestContextEndingWhileQueuedNeverRunsTheTask(t *testing.T) {
	e := newExec(t, Options{Slots: 1})
	release := hold(t, e, 1)
	defer release()
	ctx, cancel := context.WithCancel(context.Background())
	var ran atomic.Bool
	doErr := make(chan error)
	go func() {
		doErr <- e.Do(ctx, Interactive, func(context.Context) error { ran.Store(true); return nil })
	}()
	task, err := e.Go(ctx, Batch, func(context.Context) error { ran.Store(true); return nil })
	if err != nil {
		t.Fatal(err)
	}
	waitQueued(t, e, Interactive, 1)
	waitQueued(t, e, Batch, 1)
	cancel()
	if err := <-doErr; !errors.Is(err, context.Canceled) {
		t.Errorf("Do: %v", err)
	}
	if err := task.Wait(context.Background()); !errors.Is(err, context.Canceled) {
		t.Errorf("Go: %v", err)
	}
	if ran.Load() {
		t.Error("a canceled task ran")
	}
	if _, err := e.Go(ctx, Batch, func(context.Context) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("Go with an ended ctx: %v", err)
	}
	st := e.Stats()
	if st.Classes[Interactive].Canceled != 1 || st.Classes[Batch].Canceled != 2 {
		t.Errorf("canceled counts %d %d", st.Classes[Interactive].Canceled, st.Classes[Batch].Canceled)
	}
}

func TestNestedDoAndForRunOnTheHeldSlot(t *testing.T) {
	e := newExec(t, Options{Slots: 1})
	var sum atomic.Int64
	err := e.Do(context.Background(), Interactive, func(ctx context.Context) error {
		return e.Do(ctx, Critical, func(ctx context.Context) error {
			return e.For(ctx, Batch, 1000, func(lo, hi int) error {
				for i := lo; i < hi; i++ {
					sum.Add(int64(i))
				}
				return nil
			})
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Load() != 999*1000/2 {
		t.Errorf("sum %d", sum.Load())
	}
	if n := e.Stats().Classes[Interactive].Nested; n != 2 { // the Do and the For, on the Interactive slot
		t.Errorf("nested %d", n)
	}
}

func goroutineID() string {
	b := make([]byte, 64)
	b = b[:runtime.Stack(b, false)]
	f := strings.Fields(string(b))
	return f[1]
}

// Issue 21: a nested Do or For (on the slot of an enclosing task) counts
// in Nested only, whether its ctx has ended or not; before, a nested Do
// with a done ctx counted as Canceled (a submission that never existed)
// and one with a live ctx did not.
func TestNestedCallsCountInNestedOnly(t *testing.T) {
	e, err := New(Options{Slots: 1, WatchInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	live, stop := context.WithCancel(context.Background())
	err = e.Do(live, Interactive, func(ctx context.Context) error {
		if err := e.Do(ctx, Interactive, func(context.Context) error { return nil }); err != nil {
			return err
		}
		if err := e.For(ctx, Interactive, 3, func(int, int) error { return nil }); err != nil {
			return err
		}
		stop()
		if err := e.Do(ctx, Interactive, func(context.Context) error { t.Error("ran with a done ctx"); return nil }); !errors.Is(err, context.Canceled) {
			t.Errorf("nested Do with a done ctx = %v", err)
		}
		if err := e.For(ctx, Interactive, 3, func(int, int) error { t.Error("ran with a done ctx"); return nil }); !errors.Is(err, context.Canceled) {
			t.Errorf("nested For with a done ctx = %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	cs := e.Stats().Classes[Interactive]
	if cs.Nested != 4 || cs.Canceled != 0 || cs.Submitted != 1 || cs.Admitted != 1 {
		t.Errorf("nested %d, canceled %d, submitted %d, admitted %d; want 4, 0, 1, 1", cs.Nested, cs.Canceled, cs.Submitted, cs.Admitted)
	}
}

// A task's context watch (context.AfterFunc) can run late: after the task
// was granted a slot, started, and re-queued itself at a Checkpoint. The
// watch must then leave the task alone; before the fix it removed the
// re-queued waiter, closed Task.Done while fn was still running, and fn
// blocked in Checkpoint forever.
func TestALateCancelNeverTouchesATaskThatStarted(t *testing.T) {
	e := newExec(t, Options{Slots: 1})
	release := hold(t, e, 1) // the Batch task queues, then is granted
	running := make(chan struct{})
	critQueued := make(chan struct{})
	var runs atomic.Int32
	ctx, cancelCtx := context.WithCancel(context.Background())
	defer cancelCtx()
	task, err := e.Go(ctx, Batch, func(ctx context.Context) error {
		runs.Add(1)
		close(running)
		<-critQueued
		return Checkpoint(ctx) // hands the slot to Critical and re-queues
	})
	if err != nil {
		t.Fatal(err)
	}
	waitQueued(t, e, Batch, 1)
	release()
	<-running
	critGate, critDone := queueCritical(t, e)
	close(critQueued)
	waitQueued(t, e, Batch, 1) // the Batch task is re-queued behind Critical
	// What a context.AfterFunc that fired just now would do.
	e.cancelQueued(task)
	select {
	case <-task.Done():
		t.Fatalf("Task.Done closed while fn is still running (err %v)", task.err)
	default:
	}
	close(critGate)
	if err := <-critDone; err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := task.Wait(ctx); err != nil {
		t.Fatalf("task: %v (runs %d)", err, runs.Load())
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("fn ran %d times", n)
	}
}

// A context that is done before admission means fn never runs and the
// context's error is returned, for every class and every entry point.
func TestADoneContextNeverRunsTheTaskInAnyClass(t *testing.T) {
	e := newExec(t, Options{Slots: 2})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for c := range Class(numClasses) {
		ran := false
		fn := func(context.Context) error { ran = true; return nil }
		if err := e.Do(ctx, c, fn); !errors.Is(err, context.Canceled) {
			t.Errorf("Do(%s) = %v", c, err)
		}
		if _, err := e.Go(ctx, c, fn); !errors.Is(err, context.Canceled) {
			t.Errorf("Go(%s) = %v", c, err)
		}
		if _, err := e.TryGo(ctx, c, fn); !errors.Is(err, context.Canceled) {
			t.Errorf("TryGo(%s) = %v", c, err)
		}
		if err := e.For(ctx, c, 10, func(int, int) error { ran = true; return nil }); !errors.Is(err, context.Canceled) {
			t.Errorf("For(%s) = %v", c, err)
		}
		if ran {
			t.Errorf("%s: fn ran with a done context", c)
		}
	}
	// Nested on a held slot too.
	live, stop := context.WithCancel(context.Background())
	err := e.Do(live, Interactive, func(ctx context.Context) error {
		stop()
		return e.Do(ctx, Interactive, func(context.Context) error { t.Error("nested fn ran"); return nil })
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("nested Do = %v", err)
	}
	if st := e.Stats(); st.Free != st.Slots {
		t.Errorf("free %d of %d", st.Free, st.Slots)
	}
}

// A nil context is a programming error, reported the same way by every
// method: a panic that says so (as the standard library does).
func TestNilContextPanicsEverywhere(t *testing.T) {
	e := newExec(t, Options{Slots: 1})
	fn := func(context.Context) error { return nil }
	//lint:ignore SA1012 the point of the test
	var nilCtx context.Context
	cases := map[string]func(){
		"Do":         func() { e.Do(nilCtx, Interactive, fn) },
		"Go":         func() { e.Go(nilCtx, Interactive, fn) },
		"TryGo":      func() { e.TryGo(nilCtx, Interactive, fn) },
		"For":        func() { e.For(nilCtx, Interactive, 1, func(int, int) error { return nil }) },
		"WithKey":    func() { WithKey(nilCtx, "k") },
		"Checkpoint": func() { Checkpoint(nilCtx) },
		"Close":      func() { e.Close(nilCtx) },
	}
	for name, f := range cases {
		t.Run(name, func(t *testing.T) {
			defer func() {
				r := recover()
				if s, _ := r.(string); !strings.Contains(s, "nil Context") {
					t.Fatalf("recovered %v, want a panic naming the nil Context", r)
				}
			}()
			f()
		})
	}
	var nilExec *Executor
	t.Run("nil executor", func(t *testing.T) {
		defer func() {
			r := recover()
			if s, _ := r.(string); !strings.Contains(s, "nil *Executor") {
				t.Fatalf("recovered %v, want a panic naming the nil *Executor", r)
			}
		}()
		nilExec.For(context.Background(), Interactive, 1, func(int, int) error { return nil })
	})
}
