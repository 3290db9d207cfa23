package admission

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// An objective (WithTarget) that cannot be met is let through late while
// the class's late budget lasts (about ten in a row from a fresh start,
// then about one in a hundred) and refused beyond it; AdmittedLate
// counts the ones let through, and each of them runs once, not judged
// again at the head.
func TestAnObjectiveExpectedLateIsLetThroughWithinTheLateBudget(t *testing.T) {
	e := newExec(t, Options{Slots: 1})
	release := hold(t, e, 1)
	const n = 400
	var ran atomic.Int64
	var tasks []*testTask
	refused := 0
	for range n {
		ctx := WithTarget(context.Background(), Target{Latency: time.Millisecond, Service: 50 * time.Millisecond})
		task, err := e.Go(ctx, Interactive, func(context.Context) error { ran.Add(1); return nil })
		switch {
		case err == nil:
			tasks = append(tasks, task)
		case errors.Is(err, ErrDeadline) && errors.Is(err, ErrSaturated):
			refused++
		default:
			t.Fatalf("err %v, want nil or a refusal wrapping ErrDeadline", err)
		}
	}
	// The first ~10 from a fresh start, then ~1 per 100 (lateBudgetShare):
	// 10-20 of 400. Without the budget none goes through; with every late
	// one let through, all do.
	if len(tasks) < 5 || len(tasks) > 20 || refused != n-len(tasks) {
		t.Errorf("%d let through, %d refused of %d expected late: want 5-20 through", len(tasks), refused, n)
	}
	st := e.Stats().Classes[Interactive]
	if st.AdmittedLate != uint64(len(tasks)) || st.Shed != uint64(refused) {
		t.Errorf("AdmittedLate %d, Shed %d; want %d and %d", st.AdmittedLate, st.Shed, len(tasks), refused)
	}
	release()
	// At the head they are later still, but a task let through is not
	// judged again: each runs once.
	for _, task := range tasks {
		if err := task.Wait(context.Background()); err != nil {
			t.Fatalf("let-through task: %v", err)
		}
	}
	if got := ran.Load(); got != int64(len(tasks)) {
		t.Errorf("%d ran, want the %d let through", got, len(tasks))
	}
	if st := e.Stats().Classes[Interactive]; st.AdmittedLate != uint64(len(tasks)) {
		t.Errorf("AdmittedLate %d after they ran, want %d (each counted once)", st.AdmittedLate, len(tasks))
	}
}

// lateBudgetShare runs the late budget over a stream in which one task in
// every period is expected late, and returns the share let through.
func lateBudgetShare(period, n int) (through int) {
	e := &testExec{}
	for c := range e.stats {
		e.g.cnt[c] = &e.stats[c]
	}
	for i := range n {
		late := i%period == 0
		if e.g.lateOKLocked(Interactive, late) && late {
			through++
		}
	}
	return through
}

// The budget's long-run share: every late task goes through while fewer
// than 1 % are late; when all are late (overload), about 1 % do.
func TestTheLateBudgetLetsThroughAbout1Percent(t *testing.T) {
	const n = 200_000
	if got := lateBudgetShare(200, n); got != n/200 {
		t.Errorf("one late in 200: %d of %d let through, want all", got, n/200)
	}
	got := lateBudgetShare(1, n)
	share := float64(got) / n
	if share < 0.009 || share > 0.012 {
		t.Errorf("all late: %.4f let through, want about 0.01", share)
	}
	// From a fresh start, a burst of late tasks: about ten go through.
	burst := lateBudgetShare(1, 20)
	if burst < 8 || burst > 12 {
		t.Errorf("20 late from a fresh start: %d let through, want about 10", burst)
	}
	t.Logf("all late: %d of %d let through (%.2f %%); one late in 50: %d of %d; 20 late from a fresh start: %d",
		got, n, 100*share, lateBudgetShare(50, n), n/50, burst)
}

// At the head an objective (WithTarget) with less time left than its run
// time is late: it runs late while its class's late budget lasts
// (counted in AdmittedLate) and is refused once the budget is spent.
func TestAtTheHeadALateObjectiveRunsWithinTheBudgetAndIsRefusedBeyondIt(t *testing.T) {
	e := newExec(t, Options{Slots: 1})
	run := func(share int32) error {
		release := hold(t, e, 1)
		e.g.lock()
		e.g.lateShare[Interactive] = share
		e.g.unlock()
		// 150 ms objective, 100 ms to run: on time at the door, at the
		// head after ~100 ms with ~50 ms left.
		ctx := WithTarget(context.Background(), Target{Latency: 150 * time.Millisecond, Service: 100 * time.Millisecond})
		task, err := e.Go(ctx, Interactive, func(context.Context) error { return nil })
		if err != nil {
			release()
			return fmt.Errorf("at the door: %w", err)
		}
		waitQueued(t, e, Interactive, 1)
		time.Sleep(100 * time.Millisecond)
		release()
		return task.Wait(context.Background())
	}
	if err := run(lateOne / 2); !errors.Is(err, ErrDeadline) {
		t.Errorf("late at the head, budget spent: %v, want ErrDeadline", err)
	}
	before := e.Stats().Classes[Interactive].AdmittedLate
	if err := run(0); err != nil {
		t.Errorf("late at the head, budget left: %v, want it run", err)
	}
	if got := e.Stats().Classes[Interactive].AdmittedLate; got != before+1 {
		t.Errorf("AdmittedLate %d, want %d", got, before+1)
	}
}

// Allow gives the door's verdict without submitting: nil when a task
// would run at once or queue, the door's error otherwise; its refusals
// are counted like a submission's, and it reads the late budget without
// spending it.
func TestAllowSaysWhatTheDoorWould(t *testing.T) {
	e := newExec(t, Options{Slots: 1, Classes: [NumClasses]ClassOptions{Interactive: {QueueLimit: 1}}})
	hopeless := WithTarget(context.Background(), Target{Latency: time.Millisecond, Service: 50 * time.Millisecond})
	// A free slot and nobody waiting: it would run at once, never judged.
	if err := e.Allow(hopeless, Interactive); err != nil {
		t.Fatalf("free slot: %v, want nil", err)
	}
	var once sync.Once
	held := hold(t, e, 1)
	release := func() { once.Do(held) }
	defer release()
	// Budget spent: an objective expected late is refused, and counted.
	e.g.lock()
	e.g.lateShare[Interactive] = lateOne / 2
	e.g.unlock()
	before := e.Stats().Classes[Interactive]
	if err := e.Allow(hopeless, Interactive); !errors.Is(err, ErrDeadline) || !errors.Is(err, ErrSaturated) {
		t.Fatalf("objective past its due, budget spent: %v, want ErrDeadline and ErrSaturated", err)
	}
	after := e.Stats().Classes[Interactive]
	if after.Shed != before.Shed+1 || after.Rejected != before.Rejected+1 || after.Queued != 0 {
		t.Errorf("a refusal by Allow: shed %d->%d rejected %d->%d queued %d; want each +1, nothing queued",
			before.Shed, after.Shed, before.Rejected, after.Rejected, after.Queued)
	}
	// Budget left: allowed, and the budget is read, not spent.
	e.g.lock()
	e.g.lateShare[Interactive] = 0
	e.g.unlock()
	if err := e.Allow(hopeless, Interactive); err != nil {
		t.Fatalf("objective past its due, budget left: %v, want nil", err)
	}
	e.g.lock()
	share := e.g.lateShare[Interactive]
	e.g.unlock()
	if st := e.Stats().Classes[Interactive]; share != 0 || st.AdmittedLate != 0 {
		t.Errorf("Allow spent the budget: share %d, AdmittedLate %d; want 0 and 0", share, st.AdmittedLate)
	}
	// A ctx deadline it cannot meet: refused whatever the budget.
	dl, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	if err := e.Allow(WithTarget(dl, Target{Service: 50 * time.Millisecond}), Interactive); !errors.Is(err, ErrDeadline) {
		t.Errorf("deadline it cannot meet: %v, want ErrDeadline", err)
	}
	// No target: FIFO, never judged by the estimate; a full queue is.
	if err := e.Allow(context.Background(), Interactive); err != nil {
		t.Errorf("no target, room in the queue: %v, want nil", err)
	}
	queued := make(chan error, 1)
	go func() { queued <- e.Do(context.Background(), Interactive, func(context.Context) error { return nil }) }()
	waitQueued(t, e, Interactive, 1)
	if err := e.Allow(context.Background(), Interactive); err != ErrSaturated {
		t.Errorf("full queue: %v, want ErrSaturated", err)
	}
	// A done ctx: its error, nothing counted.
	done, cancelDone := context.WithCancel(context.Background())
	cancelDone()
	before = e.Stats().Classes[Interactive]
	if err := e.Allow(done, Interactive); !errors.Is(err, context.Canceled) {
		t.Errorf("done ctx: %v, want context.Canceled", err)
	}
	if after := e.Stats().Classes[Interactive]; after.Canceled != before.Canceled || after.Rejected != before.Rejected {
		t.Errorf("a done ctx was counted: %+v -> %+v", before, after)
	}
	release()
	if err := <-queued; err != nil {
		t.Fatal(err)
	}
}
