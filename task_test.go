package cpuwork

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// runtime.Goexit inside a task (t.FailNow in a test) must not kill a
// worker for good or leave the submitter waiting.
func TestGoexitInATaskIsAnErrorAndTheWorkerIsReplaced(t *testing.T) {
	for _, demote := range []bool{false, true} {
		name := "on ordinary workers"
		if demote {
			name = "on demoted workers"
		}
		t.Run(name, func(t *testing.T) {
			e := newExec(t, Options{Slots: 2, Batch: BatchOptions{Demote: demote}})
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
