package cpuwork

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestFullQueueIsSaturatedAndNothingIsLost(t *testing.T) {
	e := newExec(t, Options{Slots: 1, Classes: [numClasses]ClassOptions{Interactive: {QueueLimit: 2}, Batch: {QueueLimit: 1}}})
	release := hold(t, e, 1)
	var ran atomic.Int64
	errs := make(chan error, 3)
	for range 2 {
		go func() {
			errs <- e.Do(context.Background(), Interactive, func(context.Context) error { ran.Add(1); return nil })
		}()
	}
	waitQueued(t, e, Interactive, 2)
	if err := e.Do(context.Background(), Interactive, func(context.Context) error { return nil }); !errors.Is(err, ErrSaturated) {
		t.Errorf("third queued Interactive: %v", err)
	}
	task, err := e.Go(context.Background(), Batch, func(context.Context) error { ran.Add(1); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Go(context.Background(), Batch, func(context.Context) error { return nil }); !errors.Is(err, ErrSaturated) {
		t.Errorf("second queued Batch: %v", err)
	}
	if _, err := e.TryGo(context.Background(), Critical, func(context.Context) error { return nil }); !errors.Is(err, ErrSaturated) {
		t.Errorf("TryGo with no free slot: %v", err)
	}
	release()
	for range 2 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if err := task.Wait(context.Background()); err != nil {
		t.Error(err)
	}
	if ran.Load() != 3 {
		t.Errorf("ran %d of 3 admitted tasks", ran.Load())
	}
	if r := e.Stats().Classes[Interactive].Rejected; r != 1 {
		t.Errorf("rejected %d", r)
	}
}

// Deadline-aware admission: a task whose deadline is nearer than the
// estimated queue wait is refused at once, never runs, and is counted as
// shed; one with time enough queues as usual.
func TestADeadlineTheQueueCannotMeetIsShedAtOnce(t *testing.T) {
	e := newExec(t, Options{Slots: 1})
	release := hold(t, e, 1)
	e.stats[Interactive].AvgSlotNs.Store(int64(100 * time.Millisecond)) // what the class's tasks take
	queued := make(chan error, 1)
	go func() { queued <- e.Do(context.Background(), Interactive, func(context.Context) error { return nil }) }()
	waitQueued(t, e, Interactive, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	ran := false
	err := e.Do(ctx, Interactive, func(context.Context) error { ran = true; return nil })
	if !errors.Is(err, ErrSaturated) || !errors.Is(err, ErrDeadline) || ran {
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

// CoDel counts every admission's wait: one that took a free slot at once
// waited 0, and an interval with such admissions is not a standing queue
// even when the few queued grants in it waited long. (Counting only the
// queued ones, a light load behind one long task shed: 28-29 % of an OPA
// server's requests at 80 % of its capacity in one pair.)
func TestAdmissionsOnAFreeSlotCountAsZeroWaits(t *testing.T) {
	var mqw [numClasses]ClassOptions
	mqw[Interactive].MaxQueueWait = 10 * time.Millisecond
	e := newExec(t, Options{Slots: 1, Classes: mqw})
	release := hold(t, e, 1)
	q, err := e.Go(context.Background(), Interactive, func(context.Context) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(150 * time.Millisecond)
	release() // q is granted after 150 ms: far above the target
	q.Wait(context.Background())
	for range 5 { // a light load: every one finds the slot free
		if err := e.Do(context.Background(), Interactive, func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(120 * time.Millisecond) // the interval ends
	release = hold(t, e, 1)
	w, err := e.Go(context.Background(), Interactive, func(context.Context) error { return nil })
	if err != nil {
		t.Fatalf("an arrival behind a slot busy for the first time in 120 ms: %v, want it queued", err)
	}
	if err := e.Allow(context.Background(), Interactive); err != nil {
		t.Errorf("Allow: %v, want nil", err)
	}
	release()
	w.Wait(context.Background())
}
