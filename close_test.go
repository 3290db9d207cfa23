package cpuwork

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cpuwork/cpuwork/budget"
	"github.com/cpuwork/cpuwork/osthread"
	"go.uber.org/goleak"
)

func TestCloseDrainsQueuedTasksThenRejects(t *testing.T) {
	e, err := New(Options{Slots: 1})
	if err != nil {
		t.Fatal(err)
	}
	release := hold(t, e, 1)
	var ran atomic.Int64
	tasks := make([]*Task, 3)
	for i := range tasks {
		tasks[i], err = e.Go(context.Background(), Batch, func(context.Context) error { ran.Add(1); return nil })
		if err != nil {
			t.Fatal(err)
		}
	}
	closed := make(chan error)
	go func() { closed <- e.Close(context.Background()) }()
	for e.Stats().Closed == false {
		time.Sleep(100 * time.Microsecond)
	}
	if err := e.Do(context.Background(), Interactive, func(context.Context) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Errorf("Do after Close: %v", err)
	}
	if _, err := e.Go(context.Background(), Batch, func(context.Context) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Errorf("Go after Close: %v", err)
	}
	release()
	if err := <-closed; err != nil {
		t.Errorf("Close: %v", err)
	}
	for _, task := range tasks {
		if err := task.Wait(context.Background()); err != nil {
			t.Error(err)
		}
	}
	if ran.Load() != 3 {
		t.Errorf("drained %d of 3", ran.Load())
	}
}

func TestCloseWithExpiredContextFailsTheQueue(t *testing.T) {
	e, err := New(Options{Slots: 1})
	if err != nil {
		t.Fatal(err)
	}
	release := hold(t, e, 1)
	task, err := e.Go(context.Background(), Batch, func(context.Context) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	doErr := make(chan error)
	go func() { doErr <- e.Do(context.Background(), Critical, func(context.Context) error { return nil }) }()
	waitQueued(t, e, Critical, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := e.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close: %v", err)
	}
	if err := task.Wait(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("queued Go task: %v", err)
	}
	if err := <-doErr; !errors.Is(err, ErrClosed) {
		t.Errorf("queued Do: %v", err)
	}
	release()
	if err := e.Close(context.Background()); err != nil {
		t.Errorf("second Close: %v", err)
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

// A class with a task running is never idle, however fast other tasks
// of the class are admitted and finish meanwhile (Close waits for idle).
func TestAClassWithATaskRunningIsNeverIdle(t *testing.T) {
	var s classStats
	s.Admitted.Inc(1) // the task that runs throughout
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // others admitted and finished as fast as can be, over every shard
		defer wg.Done()
		for i := uintptr(0); ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			s.Admitted.Inc(i)
			s.Completed.Inc(i * 7)
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	deadline := time.Now().Add(200 * time.Millisecond)
	for time.Now().Before(deadline) {
		for range 1000 {
			if s.idle() {
				t.Fatal("a class with a task running was found idle")
			}
		}
	}
}
