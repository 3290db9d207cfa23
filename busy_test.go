package cpuwork

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/cpuwork/cpuwork/budget"
)

// Slots that hold tasks not on a CPU (here: sleeping, as a task reading a
// body or fetching a source waits) leave the cores idle while work queues:
// the budget watcher opens slots beside the budget's, up to twice them,
// and closes them again once completions no longer find work queued.
func TestSlotsThatLeaveTheCPUIdleWhileWorkQueuesGetCompany(t *testing.T) {
	detect := func() (budget.Budget, error) {
		return budget.Budget{Cores: 2, Source: budget.SourceAffinity, GOMAXPROCS: 2, Affinity: 2, NumCPU: 2}, nil
	}
	e, err := New(Options{detect: detect, WatchInterval: time.Hour, Account: AccountOptions{Every: -1}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	if n := e.Slots(); n != 2 {
		t.Fatalf("slots at start %d, want 2", n)
	}
	run := func(workers int, until func() bool) {
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for range workers {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					e.Do(context.Background(), Interactive, func(ctx context.Context) error {
						time.Sleep(2 * time.Millisecond)
						return nil
					})
				}
			})
		}
		deadline := time.Now().Add(10 * time.Second)
		for !until() && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		close(stop)
		wg.Wait()
	}
	run(8, func() bool { return e.Slots() == 4 })
	if n := e.Slots(); n != 4 {
		t.Fatalf("idle slots with work queued: %d slots, want 4 (twice the budget's)", n)
	}
	run(1, func() bool { return e.Slots() == 2 })
	if n := e.Slots(); n != 2 {
		t.Fatalf("nothing queued: %d slots, want 2 (the budget's)", n)
	}
}
