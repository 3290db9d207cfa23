package cpuwork

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cpuwork/cpuwork/budget"
	"github.com/cpuwork/cpuwork/osthread"
	"go.uber.org/goleak"
)

// Regression tests for the executor defects found by randomized testing
// from outside the project (issue 9). Each failed before its fix.

// A task's context watch (context.AfterFunc) can run late: after the task
// was granted a slot, started, and re-queued itself at a Checkpoint. The
// watch must then leave the task alone; before the fix it removed the
// re-queued waiter, closed Task.Done while fn was still running, and fn
// blocked in Checkpoint forever.
func TestALateCancelNeverTouchesATaskThatStarted(t *testing.T) {
	e := newExec(t, Options{Slots: 1, Demotion: DemoteNever})
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
		t.Fatalf("Task.Done closed while fn is still running (err %v)", task.Err())
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

// runtime.Goexit inside a task (t.FailNow in a test) must not kill a
// worker for good or leave the submitter waiting.
func TestGoexitInATaskIsAnErrorAndTheWorkerIsReplaced(t *testing.T) {
	for _, demote := range []bool{false, true} {
		name := "on ordinary workers"
		if demote {
			name = "on demoted workers"
		}
		t.Run(name, func(t *testing.T) {
			e := newExec(t, Options{Slots: 2, Demotion: map[bool]Demotion{true: DemoteAlways, false: DemoteNever}[demote]})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for _, c := range []Class{Interactive, Batch, Background} {
				for range 3 { // more than Slots: every worker would be gone
					task, err := e.Go(ctx, c, func(context.Context) error { runtime.Goexit(); return nil })
					if err != nil {
						t.Fatal(err)
					}
					if err := task.Wait(ctx); !errors.Is(err, ErrGoexit) {
						t.Fatalf("%s: Wait = %v, want ErrGoexit", c, err)
					}
				}
				if !c.runsOnWorker() {
					continue // Do runs it on this goroutine: see below
				}
				if err := e.Do(ctx, c, func(context.Context) error { runtime.Goexit(); return nil }); !errors.Is(err, ErrGoexit) {
					t.Fatalf("%s: Do = %v, want ErrGoexit", c, err)
				}
			}
			// Do on the caller's goroutine: Goexit ends the caller, the
			// slot comes back.
			done := make(chan struct{})
			go func() {
				defer close(done)
				e.Do(ctx, Interactive, func(context.Context) error { runtime.Goexit(); return nil })
			}()
			<-done
			for _, c := range []Class{Critical, Interactive, Batch, Background} {
				task, err := e.Go(ctx, c, func(context.Context) error { return nil })
				if err != nil {
					t.Fatal(err)
				}
				if err := task.Wait(ctx); err != nil {
					t.Fatalf("%s after Goexits: %v", c, err)
				}
			}
			st := e.Stats()
			if st.Free != st.Slots {
				t.Fatalf("free %d of %d slots after every task ended", st.Free, st.Slots)
			}
		})
	}
}

// A worker runs the task granted to its pool at its task's end itself
// (keepNext). When that task ended in runtime.Goexit the worker goroutine
// is gone: the granted task must go to another worker, not vanish.
func TestATaskGrantedAtAGoexitStillRuns(t *testing.T) {
	for _, c := range []Class{Interactive, Batch} {
		e := newExec(t, Options{Slots: 1})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		release := make(chan struct{})
		first, err := e.Go(ctx, c, func(context.Context) error { <-release; runtime.Goexit(); return nil })
		if err != nil {
			t.Fatal(err)
		}
		var ran atomic.Int32
		var queued []*Task
		for range 3 { // queued behind the one slot, granted at first's end
			task, err := e.Go(ctx, c, func(context.Context) error { ran.Add(1); return nil })
			if err != nil {
				t.Fatal(err)
			}
			queued = append(queued, task)
		}
		close(release)
		if err := first.Wait(ctx); !errors.Is(err, ErrGoexit) {
			t.Fatalf("%s: first: %v, want ErrGoexit", c, err)
		}
		for i, task := range queued {
			if err := task.Wait(ctx); err != nil {
				t.Fatalf("%s: task %d queued behind a Goexit: %v (ran %d of 3)", c, i, err, ran.Load())
			}
		}
		cancel()
	}
}

// Checkpoint called with the enclosing task's context from For's chunk
// callbacks runs on several goroutines at once: it must be safe (run with
// -race) and never hand the task's slot over from a helper.
func TestCheckpointFromForChunksIsSafe(t *testing.T) {
	e := newExec(t, Options{Slots: 3, Demotion: DemoteNever})
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

// A context that is done before admission means fn never runs and the
// context's error is returned, for every class and every entry point.
func TestADoneContextNeverRunsTheTaskInAnyClass(t *testing.T) {
	e := newExec(t, Options{Slots: 2})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for c := range Class(NumClasses) {
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

// New must not leave the critical lane's threads behind when it fails,
// and Close with an expired context must finish the job (workers, lane)
// once the last task ends, without a polling goroutine.
func TestNewFailureAndAnExpiredCloseLeakNothing(t *testing.T) {
	defer goleak.VerifyNone(t)
	_, err := New(Options{CriticalLane: &osthread.Options{Threads: 1},
		detect: func() (budget.Budget, error) { return budget.Budget{}, errors.New("no budget") }})
	if err == nil {
		t.Fatal("New succeeded without a budget")
	}
	e, err := New(Options{Slots: 1, CriticalLane: &osthread.Options{Threads: 1}})
	if err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{})
	started := make(chan struct{})
	task, err := e.Go(context.Background(), Batch, func(context.Context) error { close(started); <-gate; return nil })
	if err != nil {
		t.Fatal(err)
	}
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel()
	if err := e.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close = %v, want DeadlineExceeded", err)
	}
	close(gate)
	if err := task.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
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
		"Call":       func() { Call(nilCtx, e, Interactive, func(context.Context) (int, error) { return 0, nil }) },
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

// A task whose Checkpoint lost its slot (its ctx ended while it was
// re-queued) and that keeps calling Checkpoint must not hand over a slot
// it no longer holds. Found by the stress test: one slot too many after
// Close.
func TestCheckpointAfterTheSlotWasLostGivesNothingBack(t *testing.T) {
	e := newExec(t, Options{Slots: 1, Demotion: DemoteNever})
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

// Deadline-aware admission: a task whose deadline is nearer than the
// estimated queue wait is refused at once, never runs, and is counted as
// shed; one with time enough queues as usual.
func TestADeadlineTheQueueCannotMeetIsShedAtOnce(t *testing.T) {
	e := newExec(t, Options{Slots: 1})
	release := hold(t, e, 1)
	e.stats[Interactive].avgSlotNs.Store(int64(100 * time.Millisecond)) // what the class's tasks take
	queued := make(chan error, 1)
	go func() { queued <- e.Do(context.Background(), Interactive, func(context.Context) error { return nil }) }()
	waitQueued(t, e, Interactive, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	ran := false
	err := e.Do(ctx, Interactive, func(context.Context) error { ran = true; return nil })
	var se *shedError
	if !errors.Is(err, ErrSaturated) || !errors.As(err, &se) || ran {
		t.Fatalf("Do with a 20 ms deadline behind ~200 ms of queue: err %v, ran %v", err, ran)
	}
	if st := e.Stats().Classes[Interactive]; st.Shed != 1 || st.Rejected != 1 {
		t.Errorf("shed %d rejected %d, want 1 and 1", st.Shed, st.Rejected)
	}
	long, cancel2 := context.WithTimeout(context.Background(), time.Minute)
	defer cancel2()
	done := make(chan error, 1)
	go func() { done <- e.Do(long, Interactive, func(context.Context) error { return nil }) }()
	waitQueued(t, e, Interactive, 2)
	release()
	if err := <-queued; err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("a deadline the queue can meet: %v", err)
	}
}

// The queue-wait target's controller: an interval whose smallest granted
// wait stayed above the target makes the class shed arrivals that would
// queue behind others; an interval under the target ends it; an arrival
// that finds the queue empty is never shed.
func TestQueueWaitTargetShedsAStandingQueueOnly(t *testing.T) {
	var mqw [NumClasses]time.Duration
	mqw[Interactive] = time.Millisecond
	e := newExec(t, Options{Slots: 1, MaxQueueWait: mqw})
	iv := int64(codelInterval)
	e.mu.Lock()
	st := &e.shed[Interactive]
	st.intervalStart = 0
	e.codelGrantLocked(Interactive, int64(5*time.Millisecond), iv/2) // above the target
	e.codelGrantLocked(Interactive, int64(3*time.Millisecond), iv+1) // interval ends: smallest 3 ms > 1 ms
	shedding := st.shedding
	e.mu.Unlock()
	if !shedding {
		t.Fatal("a standing queue (smallest wait 3 ms over a 1 ms target) does not shed")
	}
	// Shedding, but the queue is empty: the arrival is admitted.
	if err := e.Do(context.Background(), Interactive, func(context.Context) error { return nil }); err != nil {
		t.Fatalf("an arrival at an empty queue: %v", err)
	}
	// Shedding with a queue: refused at once.
	release := hold(t, e, 1)
	queued := make(chan error, 1)
	e.mu.Lock()
	st.shedding, st.intervalStart = false, now() // let one task queue
	e.mu.Unlock()
	go func() { queued <- e.Do(context.Background(), Interactive, func(context.Context) error { return nil }) }()
	waitQueued(t, e, Interactive, 1)
	e.mu.Lock()
	st.shedding, st.intervalStart = true, now()
	e.mu.Unlock()
	err := e.Do(context.Background(), Interactive, func(context.Context) error { return nil })
	if !errors.Is(err, ErrSaturated) || !strings.Contains(err.Error(), "queue-wait target") {
		t.Fatalf("an arrival behind a standing queue: %v", err)
	}
	release()
	if err := <-queued; err != nil {
		t.Fatal(err)
	}
	// An interval whose smallest wait is under the target ends shedding.
	e.mu.Lock()
	st.intervalStart, st.minWait = 0, int64(time.Hour)
	e.codelGrantLocked(Interactive, int64(100*time.Microsecond), iv+1)
	shedding = st.shedding
	e.mu.Unlock()
	if shedding {
		t.Fatal("an interval under the target did not end shedding")
	}
	if st := e.Stats().Classes[Interactive]; st.Shed != 1 {
		t.Errorf("Shed %d, want 1", st.Shed)
	}
}

// Background progresses under sustained Interactive load: it gets a slot
// after backgroundEvery grants to other classes while it waits.
func TestBackgroundGetsASlotUnderSustainedLoad(t *testing.T) {
	e := newExec(t, Options{Slots: 1, QueueLimit: [NumClasses]int{0, 4096, 0, 0}})
	release := hold(t, e, 1)
	var mu sync.Mutex
	var order []Class
	record := func(c Class) func(context.Context) error {
		return func(context.Context) error { mu.Lock(); order = append(order, c); mu.Unlock(); return nil }
	}
	bg, err := e.Go(context.Background(), Background, record(Background))
	if err != nil {
		t.Fatal(err)
	}
	waitQueued(t, e, Background, 1)
	var tasks []*Task
	for range 3 * backgroundEvery {
		task, err := e.Go(context.Background(), Interactive, record(Interactive))
		if err != nil {
			t.Fatal(err)
		}
		tasks = append(tasks, task)
	}
	release()
	ctx := context.Background()
	if err := bg.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		task.Wait(ctx)
	}
	i := slices.Index(order, Background)
	if i < 0 || i > backgroundEvery {
		t.Fatalf("Background ran after %d Interactive tasks, want at most %d", i, backgroundEvery)
	}
}

// An invalid class never answers with another class's data.
func TestHistogramsOfAnInvalidClassAreEmpty(t *testing.T) {
	e := newExec(t, Options{Slots: 1})
	for range 5 {
		e.Do(context.Background(), Critical, func(context.Context) error { return nil })
	}
	bad := Class(NumClasses) // Critical's data before the fix (c % NumClasses)
	if h := e.QueueWaitHistogram(bad); len(h.Count) != 0 || h.SumSeconds != 0 {
		t.Errorf("QueueWaitHistogram(%d) = %+v", bad, h)
	}
	if h := e.SlotTimeHistogram(bad); len(h.Count) != 0 {
		t.Errorf("SlotTimeHistogram(%d) = %+v", bad, h)
	}
}

// queueCritical submits a Critical task that queues for a slot and, once it
// has one, holds it until gate is closed; done gets its Do's result.
func queueCritical(t *testing.T, e *Executor) (gate chan struct{}, done chan error) {
	t.Helper()
	gate, done = make(chan struct{}), make(chan error, 1)
	go func() {
		done <- e.Do(context.Background(), Critical, func(context.Context) error { <-gate; return nil })
	}()
	waitQueued(t, e, Critical, 1)
	return gate, done
}
