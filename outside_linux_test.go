package cpuwork

import (
	"context"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cpuwork/cpuwork/account"
	"github.com/cpuwork/cpuwork/budget"
)

// A server that sets GOMAXPROCS below its CPU budget (automaxprocs rounds a
// 1.5-CPU quota down to 1) and whose tasks run in cgo or system calls gets
// the slots the budget allows: those tasks hold no P, so GOMAXPROCS does
// not bound the CPU they use. Tasks that run Go code keep GOMAXPROCS as
// their bound, and the executor says what that costs.
func TestSlotsFollowTheBudgetWhenTasksRunOutsidePs(t *testing.T) {
	detect := func() (budget.Budget, error) {
		return budget.Budget{Cores: 2, Source: budget.SourceAffinity, GOMAXPROCS: 1, Affinity: 2, NumCPU: 2}, nil
	}
	e, err := New(Options{detect: detect, WatchInterval: time.Hour, Account: account.Options{Every: -1}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	if n := e.slotsNow(); n != 1 {
		t.Fatalf("slots at start %d, want 1 (GOMAXPROCS)", n)
	}
	// load runs tasks from 4 goroutines until stop: each in a system
	// call (outside Go) or spinning in Go.
	load := func(outside bool, until func() bool) {
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for range 4 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					e.Do(context.Background(), Interactive, func(ctx context.Context) error {
						if outside {
							ts := syscall.Timespec{Nsec: int64(2 * time.Millisecond)}
							syscall.Nanosleep(&ts, nil)
							return nil
						}
						for t0 := time.Now(); time.Since(t0) < 2*time.Millisecond; {
						}
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
	load(true, func() bool { return e.slotsNow() == 2 })
	if n := e.slotsNow(); n != 2 {
		t.Fatalf("tasks in system calls: slots %d, want 2 (the budget's cores)", n)
	}
	if w := e.Stats().Warning; w != "" {
		t.Errorf("warning %q while the slots use the whole budget", w)
	}
	load(false, func() bool { return e.slotsNow() == 1 && e.Stats().Warning != "" })
	if n := e.slotsNow(); n != 1 {
		t.Fatalf("tasks in Go code: slots %d, want 1 (GOMAXPROCS)", n)
	}
	if w := e.Stats().Warning; !strings.Contains(w, "GOMAXPROCS 1 caps the slots") {
		t.Errorf("warning %q, want one naming GOMAXPROCS 1", w)
	}
}
