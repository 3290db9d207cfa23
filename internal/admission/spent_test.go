package admission

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"
)

// While a class without ClassOptions.MaxQueueWait sheds in a clear
// overload and the CPU budget is spent, it holds no queue: an arrival
// that finds no free slot is refused, the first in line too, since the
// quota, not the slots, bounds the work. With the budget not spent, or
// near capacity (the arrivals did not bring 1.5 times the slots' work),
// the same arrival queues.
func TestASheddingClassQueuesNothingWhileTheBudgetIsSpent(t *testing.T) {
	for _, c := range []struct{ spent, clear bool }{{false, true}, {true, false}, {true, true}} {
		e := newExec(t, Options{Slots: 1})
		release := sync.OnceFunc(hold(t, e, 1))
		e.g.lock()
		st := &e.g.shed[Interactive]
		st.auto, st.target, st.mode = true, int64(10*time.Millisecond), modeOf(true, c.clear)
		st.iv.start, st.iv.minWait = now(), math.MaxInt64
		e.g.unlock()
		e.g.Pacer().SetBudgetSpent(c.spent)
		ctx := context.Background()
		tk, err := e.Go(WithTarget(ctx, Target{Latency: time.Second}), Interactive, func(context.Context) error { return nil })
		none := c.spent && c.clear
		switch {
		case none && err == nil:
			t.Error("the budget spent in a clear overload, a shedding class queued an arrival behind its busy slot")
		case none && (!errors.Is(err, ErrSaturated) || !strings.Contains(err.Error(), "CPU budget is spent")):
			t.Errorf("the refusal: %v, want ErrSaturated saying the CPU budget is spent", err)
		case !none && err != nil:
			t.Errorf("budget spent %v, clear overload %v: the first arrival behind the busy slot was refused: %v", c.spent, c.clear, err)
		}
		release()
		if tk != nil {
			tk.Wait(ctx)
		}
	}
}

// What the door let in before it knew the budget spent is refused at the
// head of the queue, however short its wait, while another task of the
// class waits behind it; without the budget spent only a severe overload's
// long waiters are.
func TestTheBacklogIsRefusedAtTheHeadOnceTheBudgetIsSpent(t *testing.T) {
	e, st := sheddingWithOneBehind(t)
	st.mode = overload
	t0 := now()
	w := &Waiter{class: Interactive, target: targetObjective, enq: t0 - int64(time.Millisecond)}
	if e.g.backlogLocked(w, t0) {
		t.Error("the budget not spent, not severe: a task that waited 1 ms was refused as backlog")
	}
	e.g.Pacer().SetBudgetSpent(true)
	if !e.g.spentLocked(Interactive) || !e.g.backlogLocked(w, t0) {
		t.Error("the budget spent while shedding: a task that waited 1 ms was not refused as backlog")
	}
	st.auto = false // a class with ClassOptions.MaxQueueWait keeps the queue it asked for
	if e.g.backlogLocked(w, t0) {
		t.Error("a class with its own queue-wait target lost its queue to the spent budget")
	}
}

// Shedding() follows the classes' overload state.
func TestSheddingFollowsTheClasses(t *testing.T) {
	e := newExec(t, Options{Slots: 1})
	e.g.lock()
	defer e.g.unlock()
	e.g.shed[Batch].mode = overload
	e.g.markShedLocked(Batch)
	if !e.g.Pacer().Shedding() {
		t.Fatal("a class started shedding; Shedding() says none does")
	}
	e.g.shed[Batch].mode = shedding
	e.g.markShedLocked(Batch)
	if e.g.Pacer().Shedding() {
		t.Fatal("a class sheds near capacity, not in a clear overload; Shedding() says one does")
	}
	e.g.shed[Batch].mode = calm
	e.g.markShedLocked(Batch)
	if e.g.Pacer().Shedding() {
		t.Fatal("no class sheds; Shedding() says one does")
	}
}

// sheddingWithOneBehind returns an executor of one slot whose Interactive
// class sheds with an automatic 10 ms queue-wait target and has one task
// queued (the class's last task is always served, so the backlog tests
// need one behind the task they judge), and that class's controller; the
// executor's lock is held until the test ends.
func sheddingWithOneBehind(t *testing.T) (*testExec, *queueController) {
	e := newExec(t, Options{Slots: 1})
	e.g.lock()
	t.Cleanup(e.g.unlock)
	st := &e.g.shed[Interactive]
	st.auto, st.target, st.mode = true, int64(10*time.Millisecond), shedding
	behind := &Waiter{class: Interactive, rank: math.MaxInt64}
	e.g.queues[Interactive].insertAfter(nil, behind)
	t.Cleanup(func() { e.g.queues[Interactive].remove(behind) })
	return e, st
}

// A clear overload — where a shedding class holds no queue while the
// budget is spent — is one over the recent intervals too: one interval
// of 1.6 times the slots' work after a second at 0.8 is a burst at
// capacity (a few large requests in 100 ms), half a second at twice it is
// one.
func TestAClearOverloadIsOneOverTheRecentIntervalsToo(t *testing.T) {
	e := newExec(t, Options{Slots: 1})
	e.g.lock()
	defer e.g.unlock()
	st := &e.g.shed[Interactive]
	st.auto, st.target = true, int64(10*time.Millisecond)
	iv := int64(codelInterval)
	at := now()
	tick := func(load float64) {
		at += iv
		st.mode, st.calmArrivals, st.calmFor = shedding, 0, 0 // shedding throughout: the test reads its overload mark
		st.iv.start, st.iv.minWait, st.iv.arrivals = at-iv, math.MaxInt64, 10
		st.iv.offered = int64(load * float64(iv) * e.g.serviceSlots())
		e.g.codelTickLocked(Interactive, at)
	}
	for range 10 {
		tick(0.8)
	}
	tick(1.6)
	if st.mode == overload {
		t.Error("one interval at 1.6 times the slots' work after a second at 0.8 counted as a clear overload")
	}
	for range 5 {
		tick(2)
	}
	if st.mode != overload {
		t.Error("half a second at twice the slots' work is not a clear overload")
	}
}
