package cpuwork

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestStressEveryTaskRunsOnceOrItsSubmitterGetsAnError submits a random mix
// of Do, Go, TryGo, Call and For across all classes with random
// cancellations, panics, nested calls, Checkpoints and slot-count changes,
// then Closes at a random moment. Each task records how often it ran; each
// submitter records what it got. At the end every task ran exactly once and
// returned nil, or ran at most once and its submitter saw an error (a task
// that never ran must have an error, and a task that panicked a PanicError).
func TestStressEveryTaskRunsOnceOrItsSubmitterGetsAnError(t *testing.T) {
	seeds := []uint64{1, 2, 3}
	if testing.Short() {
		seeds = seeds[:1]
	}
	for _, seed := range seeds {
		t.Run("seed", func(t *testing.T) { stress(t, seed) })
	}
}

type outcome struct {
	runs     atomic.Int32
	err      error
	reported atomic.Bool
	panics   bool
}

func stress(t *testing.T, seed uint64) {
	e, err := New(Options{Slots: 2, QueueLimit: [NumClasses]int{8, 8, 8, 8}, SpareP: seed%2 == 0})
	if err != nil {
		t.Fatal(err)
	}
	const submitters, perSubmitter = 8, 150
	outs := make([]*outcome, submitters*perSubmitter)
	var wg sync.WaitGroup
	closeAt := rand.New(rand.NewPCG(seed, 99)).IntN(submitters * perSubmitter)
	var submitted atomic.Int64
	closeDone := make(chan error, 1)
	var closeOnce sync.Once
	for s := range submitters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(s)))
			for i := range perSubmitter {
				o := &outcome{}
				outs[s*perSubmitter+i] = o
				if submitted.Add(1) == int64(closeAt) {
					closeOnce.Do(func() {
						grace := time.Duration(r.IntN(3)) * time.Millisecond
						go func() {
							ctx, cancel := context.WithTimeout(context.Background(), grace)
							defer cancel()
							closeDone <- e.Close(ctx)
						}()
					})
				}
				if r.IntN(50) == 0 {
					e.SetSlots(1 + r.IntN(4))
				}
				runOne(e, r, o)
			}
		}()
	}
	wg.Wait()
	closeOnce.Do(func() { closeDone <- nil })
	if err := e.Close(context.Background()); err != nil {
		t.Fatalf("final Close: %v", err)
	}
	<-closeDone
	for i, o := range outs {
		runs := o.runs.Load()
		if !o.reported.Load() {
			t.Fatalf("task %d: submitter never got a result", i)
		}
		var pe *PanicError
		switch {
		case runs > 1:
			t.Fatalf("task %d ran %d times", i, runs)
		case runs == 0 && o.err == nil:
			t.Fatalf("task %d never ran and its submitter got no error", i)
		case o.panics && runs == 1 && o.err == nil:
			t.Fatalf("task %d panicked but its submitter got no error", i)
		case runs == 1 && o.err != nil && !errors.Is(o.err, errTask) && !errors.As(o.err, &pe) &&
			!errors.Is(o.err, context.Canceled) && !errors.Is(o.err, ErrClosed):
			t.Fatalf("task %d ran but got %v", i, o.err)
		}
	}
}

var errTask = errors.New("task error")

func runOne(e *Executor, r *rand.Rand, o *outcome) {
	c := Class(r.IntN(NumClasses))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if r.IntN(5) == 0 {
		delay := time.Duration(r.IntN(200)) * time.Microsecond
		go func() { time.Sleep(delay); cancel() }()
	}
	o.panics = r.IntN(20) == 0
	failing := r.IntN(20) == 0
	work := time.Duration(r.IntN(300)) * time.Microsecond
	nestedOK := true
	body := func(ctx context.Context) error {
		o.runs.Add(1)
		end := time.Now().Add(work)
		for time.Now().Before(end) {
			if err := Checkpoint(ctx); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, ErrClosed) {
				return err
			}
		}
		if r := int(work) % 4; r == 0 && nestedOK { // nested call on the same slot
			if err := e.Do(ctx, Critical, func(context.Context) error { return nil }); err != nil {
				return err
			}
		}
		if o.panics {
			panic("stress panic")
		}
		if failing {
			return errTask
		}
		return nil
	}
	report := func(err error) { o.err = err; o.reported.Store(true) }
	switch r.IntN(5) {
	case 0, 1:
		report(e.Do(ctx, c, body))
	case 2:
		t, err := e.Go(ctx, c, body)
		if err != nil {
			report(err)
			return
		}
		<-t.Done()
		report(t.Err())
	case 3:
		t, err := e.TryGo(ctx, c, body)
		if err != nil {
			report(err)
			return
		}
		report(t.Wait(context.Background()))
	case 4:
		// For's fn has no task context: a Do inside it with the outer ctx
		// would wait for a second slot (documented), so none is made.
		nestedOK = false
		var once sync.Once
		report(e.For(ctx, c, 1+r.IntN(64), func(lo, hi int) error {
			var err error
			once.Do(func() { err = body(ctx) })
			return err
		}))
	}
}
