package bench

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cpuwork/cpuwork"
)

// A large request run as one task per image on one slot (the inference
// scenario's 1.0-CPU cgroup) is admitted whole: each part's expected run
// time is one image's, so its own siblings queued ahead do not make its
// last part look late. With the request's run time on every part, the
// fourth of four was refused with ErrDeadline.
func TestALargeRequestsPartsOnOneSlotAreNotRefusedByEachOther(t *testing.T) {
	e, err := cpuwork.New(cpuwork.Options{Slots: 1, WatchInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	sv := serving{slo: 3 * 4 * 5 * time.Millisecond, perImage: 5 * time.Millisecond}
	ctx := cpuwork.WithTarget(context.Background(), partTarget(sv))
	var ran atomic.Int32
	err = runParts(ctx, e, cpuwork.Interactive, 4, func(int) error {
		time.Sleep(sv.perImage)
		ran.Add(1)
		return nil
	})
	if err != nil || ran.Load() != 4 {
		t.Fatalf("4 parts on one slot: %d ran, err %v; want all 4 and no error", ran.Load(), err)
	}
}

// A part refused at submission fails the request with its error and
// cancels the parts queued before it, which then do not run.
func TestARefusedPartCancelsItsQueuedSiblings(t *testing.T) {
	e, err := cpuwork.New(cpuwork.Options{Slots: 1, WatchInterval: -1, QueueLimit: [cpuwork.NumClasses]int{cpuwork.Interactive: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	release := make(chan struct{})
	hold, err := e.Go(context.Background(), cpuwork.Interactive, func(context.Context) error { <-release; return nil })
	if err != nil {
		t.Fatal(err)
	}
	var ran atomic.Int32
	go func() { time.Sleep(50 * time.Millisecond); close(release) }()
	// Part 0 queues behind hold (the queue's one place), part 1 is refused.
	err = runParts(context.Background(), e, cpuwork.Interactive, 2, func(int) error { ran.Add(1); return nil })
	if !errors.Is(err, cpuwork.ErrSaturated) {
		t.Errorf("err %v, want ErrSaturated (the queue was full)", err)
	}
	if err := hold.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := ran.Load(); n != 0 {
		t.Errorf("%d parts ran after a sibling was refused, want 0 (cancelled in the queue)", n)
	}
}
