package cpuwork

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cpuwork/cpuwork/budget"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv("CPUWORK_FRACTION_CHILD") == "beside" {
		besideChild()
		return
	}
	if os.Getenv("CPUWORK_FRACTION_CHILD") != "" {
		fractionChild()
		return
	}
	if os.Getenv("CPUWORK_ACCOUNT_CHILD") != "" {
		accountChild()
		return
	}
	goleak.VerifyTestMain(m)
}

func newExec(t testing.TB, o Options) *Executor {
	t.Helper()
	e, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return e
}

// hold occupies every slot of e with Interactive tasks until the returned
// release function is called.
func hold(t *testing.T, e *Executor, n int) (release func()) {
	t.Helper()
	return holdAs(t, e, n, Interactive)
}

// holdAs is hold with tasks of class c.
func holdAs(t *testing.T, e *Executor, n int, c Class) (release func()) {
	t.Helper()
	gate := make(chan struct{})
	var started sync.WaitGroup
	started.Add(n)
	var done sync.WaitGroup
	done.Add(n)
	for range n {
		go func() {
			defer done.Done()
			e.Do(context.Background(), c, func(context.Context) error {
				started.Done()
				<-gate
				return nil
			})
		}()
	}
	started.Wait()
	return func() { close(gate); done.Wait() }
}

func waitQueued(t *testing.T, e *Executor, c Class, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for e.Stats().Classes[c].Queued < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d %s tasks never queued (have %d)", n, c, e.Stats().Classes[c].Queued)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func TestNewRejectsInvalidOptions(t *testing.T) {
	for _, o := range []Options{
		{Slots: -1},
		{Slots: maxSlots + 1},
		{Slots: 1, Classes: [numClasses]ClassOptions{Batch: {QueueLimit: -1}}},
		{Slots: 1, Classes: [numClasses]ClassOptions{Interactive: {Weight: -2}}},
		{Slots: 1, Classes: [numClasses]ClassOptions{Critical: {Weight: 2}}},
		{Slots: 1, Classes: [numClasses]ClassOptions{Batch: {MaxQueueWait: -time.Millisecond}}},
		{Slots: 1, Classes: [numClasses]ClassOptions{Interactive: {LatencyTarget: -time.Millisecond}}},
		{Quota: QuotaStrict + 1},
	} {
		if _, err := New(o); err == nil {
			t.Errorf("New(%+v) gave no error", o)
		}
	}
}

func TestZeroOptionsFollowTheBudget(t *testing.T) {
	b, err := budget.Detect()
	if err != nil {
		t.Skipf("budget unreadable here: %v", err)
	}
	e := newExec(t, Options{})
	if e.slotsNow() != b.Slots() {
		t.Errorf("slots %d, budget says %d", e.slotsNow(), b.Slots())
	}
}

func TestNewReportsAnUnreadableBudget(t *testing.T) {
	_, err := New(Options{detect: func() (budget.Budget, error) { return budget.Budget{}, budget.ErrMalformed }})
	if !errors.Is(err, budget.ErrMalformed) {
		t.Errorf("err %v", err)
	}
}

func spin(d time.Duration) {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
	}
}

// Slots reads what SetSlots set, as Stats does.
func TestSlotsReadsTheSlotCount(t *testing.T) {
	e := newExec(t, Options{Slots: 2})
	if n := e.Slots(); n != 2 {
		t.Fatalf("Slots() = %d, want 2", n)
	}
	if err := e.SetSlots(5); err != nil {
		t.Fatal(err)
	}
	if n, st := e.Slots(), e.Stats().Slots; n != 5 || st != 5 {
		t.Fatalf("after SetSlots(5): Slots() = %d, Stats().Slots = %d, want 5", n, st)
	}
}

func TestSetSlotsGrowsAndShrinksWithoutLosingTasks(t *testing.T) {
	e := newExec(t, Options{Slots: 1})
	release := hold(t, e, 1)
	var ran atomic.Int64
	tasks := make([]*Task, 5)
	for i := range tasks {
		var err error
		tasks[i], err = e.Go(context.Background(), Batch, func(context.Context) error { ran.Add(1); return nil })
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := e.SetSlots(4); err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		task.Wait(context.Background())
	}
	if ran.Load() != 5 {
		t.Errorf("ran %d", ran.Load())
	}
	e.SetSlots(1)
	release()
	if st := e.Stats(); st.Free != 1 || st.Slots != 1 {
		t.Errorf("after shrink: %+v", st)
	}
}

func TestSlotsFollowBudgetChanges(t *testing.T) {
	var cores atomic.Int64
	cores.Store(2)
	detect := func() (budget.Budget, error) {
		return budget.Budget{Cores: float64(cores.Load())}, nil
	}
	e := newExec(t, Options{WatchInterval: time.Millisecond, detect: detect})
	if e.slotsNow() != 2 {
		t.Fatalf("slots %d", e.slotsNow())
	}
	cores.Store(3)
	deadline := time.Now().Add(10 * time.Second)
	for e.slotsNow() != 3 {
		if time.Now().After(deadline) {
			t.Fatal("slot count never followed the budget")
		}
		time.Sleep(time.Millisecond)
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

// A zero Executor (not made by New) is a programming error: every method
// panics with a message that says to call New, never a nil dereference.
func TestAZeroExecutorPanicsWithAMessage(t *testing.T) {
	var e Executor
	ctx := context.Background()
	fn := func(context.Context) error { return nil }
	for name, call := range map[string]func(){
		"Do":       func() { e.Do(ctx, Interactive, fn) },
		"Go":       func() { e.Go(ctx, Batch, fn) },
		"TryGo":    func() { e.TryGo(ctx, Batch, fn) },
		"For":      func() { e.For(ctx, Batch, 2, func(int, int) error { return nil }) },
		"Allow":    func() { e.Allow(ctx, Interactive) },
		"Close":    func() { e.Close(ctx) },
		"Stats":    func() { e.Stats() },
		"SetSlots": func() { e.SetSlots(2) },
		"Slots":    func() { e.Slots() },
	} {
		func() {
			defer func() {
				r := recover()
				if s, ok := r.(string); !ok || !strings.Contains(s, "zero Executor (create one with New)") {
					t.Errorf("%s on a zero Executor: panic %v", name, r)
				}
			}()
			call()
		}()
	}
}

// With Options.Batch.Beside, Batch work runs on slots of its own: an
// Interactive task runs at once while a Batch task holds the only slot
// of the budget's size, where without it the Interactive one waits.
func TestBatchBesideLeavesTheBudgetsSlotsToInteractiveWork(t *testing.T) {
	for _, beside := range []bool{false, true} {
		e := newExec(t, Options{Slots: 1, Batch: BatchOptions{Beside: beside}})
		release, running := make(chan struct{}), make(chan struct{})
		batch, err := e.Go(context.Background(), Batch, func(context.Context) error {
			close(running)
			<-release
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		<-running
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		err = e.Do(ctx, Interactive, func(context.Context) error { return nil })
		cancel()
		close(release)
		batch.Wait(context.Background())
		switch {
		case beside && err != nil:
			t.Errorf("Beside: an Interactive task beside a running Batch task: %v, want it run at once", err)
		case !beside && err == nil:
			t.Error("without Beside an Interactive task ran while a Batch task held the only slot")
		}
	}
}
