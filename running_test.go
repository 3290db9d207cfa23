package cpuwork

import (
	"bytes"
	"context"
	"errors"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cpuwork/cpuwork/internal/goroutine"
)

type ctxKey struct{}

// fn receives the submitter's ctx itself, whatever the path: the fast
// path, a queued Do, a Batch Do on a worker, a Go task.
func TestFnReceivesTheSubmittersContextItself(t *testing.T) {
	e := newExec(t, Options{Slots: 1})
	ctx := context.WithValue(context.Background(), ctxKey{}, "mine")
	same := func(where string) func(context.Context) error {
		return func(got context.Context) error {
			if got != ctx {
				return errors.New(where + ": fn got another context")
			}
			return nil
		}
	}
	if err := e.Do(ctx, Interactive, same("fast path")); err != nil {
		t.Error(err)
	}
	if err := e.Do(ctx, Batch, same("worker")); err != nil {
		t.Error(err)
	}
	hold := make(chan struct{})
	held := make(chan struct{})
	go e.Do(context.Background(), Interactive, func(context.Context) error { close(held); <-hold; return nil })
	<-held
	queued := make(chan error, 1)
	go func() { queued <- e.Do(ctx, Interactive, same("queued")) }()
	for e.Stats().Classes[Interactive].Queued == 0 {
		time.Sleep(50 * time.Microsecond)
	}
	close(hold)
	if err := <-queued; err != nil {
		t.Error(err)
	}
	task, err := e.Go(ctx, Interactive, same("Go"))
	if err != nil {
		t.Fatal(err)
	}
	if err := task.Wait(context.Background()); err != nil {
		t.Error(err)
	}
}

// The slot belongs to the goroutine that runs the task: a goroutine the
// task starts holds none, so its Checkpoint never hands the task's slot
// over (before, any goroutine with the task's context could, while the
// task went on running on it); the task's own Checkpoint does, whatever
// ctx it is given.
func TestOnlyTheTasksGoroutineHandsItsSlotOver(t *testing.T) {
	e := newExec(t, Options{Slots: 1})
	running := make(chan struct{})
	critical := make(chan struct{})
	checked := make(chan error, 1)
	done := make(chan error, 1)
	go func() {
		done <- e.Do(context.Background(), Batch, func(ctx context.Context) error {
			close(running)
			<-critical // a Critical task waits for the slot
			go func() { checked <- Checkpoint(ctx) }()
			if err := <-checked; err != nil {
				return err
			}
			if y := e.Stats().Classes[Batch].Yields; y != 0 {
				return errors.New("a goroutine the task started handed the task's slot over")
			}
			return Checkpoint(context.Background()) // the task's own: hands over
		})
	}()
	<-running
	crit := make(chan error, 1)
	go func() { crit <- e.Do(context.Background(), Critical, func(context.Context) error { return nil }) }()
	for e.Stats().Classes[Critical].Queued == 0 {
		time.Sleep(50 * time.Microsecond)
	}
	close(critical)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := <-crit; err != nil {
		t.Fatal(err)
	}
	if y := e.Stats().Classes[Batch].Yields; y != 1 {
		t.Errorf("yields %d, want 1 (the task's own Checkpoint)", y)
	}
}

// A Do of e inside a chunk of For runs on the slot of the goroutine that
// runs the chunk, the caller's or a helper's: no second slot is waited
// for (before, a chunk's fn had no task context and such a call could
// wait forever for a slot the loop held).
func TestDoInsideForChunksRunsOnTheChunksSlot(t *testing.T) {
	e := newExec(t, Options{Slots: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var chunks, inner atomic.Int64
	err := e.For(ctx, Interactive, 400, func(lo, hi int) error {
		chunks.Add(1)
		spin(20 * time.Microsecond)
		return e.Do(ctx, Batch, func(context.Context) error {
			inner.Add(1)
			return e.For(ctx, Batch, 3, func(int, int) error { return nil })
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if chunks.Load() != inner.Load() {
		t.Fatalf("%d chunks, %d nested Do ran", chunks.Load(), inner.Load())
	}
	cs := e.Stats().Classes
	if cs[Interactive].Admitted != 1 || cs[Batch].Admitted != 0 {
		t.Errorf("admitted %d interactive, %d batch; want the loop alone", cs[Interactive].Admitted, cs[Batch].Admitted)
	}
	if n := cs[Interactive].Nested; n != 2*uint64(chunks.Load()) {
		t.Errorf("nested %d, want %d (each chunk's Do and the For inside it)", n, 2*chunks.Load())
	}
}

// Many goroutines run tasks at once, more than the running table's
// buckets hold (the overflow map): each finds its own task, nested calls
// run on its own slot, and the table is empty afterwards.
func TestEveryRunningGoroutineFindsItsOwnTask(t *testing.T) {
	const n = 3 * 128 * 4 / 2 // the table has 128 buckets of 4 entries
	e := newExec(t, Options{Slots: n})
	var wg sync.WaitGroup
	start := make(chan struct{})
	var all sync.WaitGroup
	all.Add(n)
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			ctx := context.WithValue(context.Background(), ctxKey{}, i)
			errs <- e.Do(ctx, Interactive, func(context.Context) error {
				all.Done()
				all.Wait() // all n tasks run at once
				tk := runningTask()
				if tk == nil || tk.ctx.Value(ctxKey{}) != i {
					return errors.New("a goroutine found another's task")
				}
				if err := Checkpoint(ctx); err != nil {
					return err
				}
				return e.Do(ctx, Critical, func(context.Context) error { return nil })
			})
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if st := e.Stats().Classes[Interactive]; st.Nested != n || st.Admitted != n {
		t.Errorf("nested %d, admitted %d; want %d each", st.Nested, st.Admitted, n)
	}
	if n := running.Held(); n != 0 {
		t.Fatalf("%d running-table entries still held", n)
	}
}

// A task of another executor nested in a task of e1 runs on its own
// executor's slot (here a Batch task of e2, on e2's worker, while e1's
// task's goroutine waits for it); inside it the goroutine's task is
// e2's, and a Do of e1 runs on the slot e1's waiting task holds (before,
// the context carried it; without it the worker would wait forever for
// that slot). After it, the goroutine's task is e1's again.
func TestTasksOfTwoExecutorsNest(t *testing.T) {
	e1 := newExec(t, Options{Slots: 1})
	e2 := newExec(t, Options{Slots: 1})
	err := e1.Do(context.Background(), Interactive, func(ctx context.Context) error {
		if err := e2.Do(ctx, Batch, func(ctx context.Context) error {
			if tk := runningTask(); tk == nil || tk.e != e2 {
				return errors.New("inside e2's task the goroutine's task is not e2's")
			}
			return e1.Do(ctx, Critical, func(context.Context) error { return nil }) // on e1's slot, from inside e2's task
		}); err != nil {
			return err
		}
		if tk := runningTask(); tk == nil || tk.e != e1 {
			return errors.New("after e2's task the goroutine's task is not e1's again")
		}
		return e1.Do(ctx, Critical, func(context.Context) error { return nil })
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := e1.Stats().Classes[Interactive].Nested; n != 2 {
		t.Errorf("e1 nested %d, want 2", n)
	}
	if tk := runningTask(); tk != nil {
		t.Error("the goroutine still runs a task after both ended")
	}
}

// A task runs with its submission's profiler labels plus cpuwork.class,
// and the goroutine's own labels are back when it ends.
func TestATaskRestoresItsGoroutinesLabels(t *testing.T) {
	e := newExec(t, Options{Slots: 1})
	labeled := pprof.WithLabels(context.Background(), pprof.Labels("handler", "thumb"))
	cases := []struct {
		name string
		set  context.Context // the goroutine's labels before the task
	}{{"none", context.Background()}, {"the handler's", labeled}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pprof.SetGoroutineLabels(tc.set)
			defer pprof.SetGoroutineLabels(context.Background())
			before := goroutine.ProfLabels()
			err := e.Do(tc.set, Interactive, func(ctx context.Context) error {
				if goroutine.ProfLabels() == before {
					return errors.New("the task runs without its class label")
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if goroutine.ProfLabels() != before {
				t.Error("the goroutine's labels are not restored after the task")
			}
		})
	}
	// A worker task runs with the labels of the ctx it was submitted with
	// (the submitting goroutine has none here).
	err := e.Do(labeled, Batch, func(context.Context) error {
		var buf bytes.Buffer
		pprof.Lookup("goroutine").WriteTo(&buf, 1)
		if !strings.Contains(buf.String(), `"cpuwork.class":"batch", "handler":"thumb"`) {
			return errors.New("no goroutine runs with the submission's labels plus the class")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
