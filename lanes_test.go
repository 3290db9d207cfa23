//go:build linux

package cpuwork

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	suspensionpkg "github.com/cpuwork/cpuwork/internal/suspension"
	"github.com/cpuwork/cpuwork/osthread"
	"golang.org/x/sys/unix"
)

func policyHere() (osthread.Sched, int, error) {
	s, err := osthread.Current()
	return s, unix.Gettid(), err
}

func TestBatchRunsOnDemotedThreadsAndOthersDoNot(t *testing.T) {
	suspensionpkg.Resume() // process-wide: start as a fresh process would
	e := newExec(t, Options{Slots: 2, Batch: BatchOptions{Demote: true}})
	ctx := context.Background()
	var batchTIDs sync.Map
	check := func(c Class, want osthread.Policy) func(context.Context) error {
		return func(context.Context) error {
			s, tid, err := policyHere()
			if err != nil {
				return err
			}
			if c.runsOnWorker() {
				batchTIDs.Store(tid, true)
			}
			if s.Policy != want {
				return fmt.Errorf("%s task on thread %d runs %s, want %s", c, tid, s.Policy, want)
			}
			return nil
		}
	}
	for _, c := range []Class{Batch, Background} {
		if err := e.Do(ctx, c, check(c, osthread.Idle)); err != nil {
			t.Error(err)
		}
		task, err := e.Go(ctx, c, check(c, osthread.Idle))
		if err != nil {
			t.Fatal(err)
		}
		if err := task.Wait(ctx); err != nil {
			t.Error(err)
		}
	}
	for _, c := range []Class{Critical, Interactive} {
		if err := e.Do(ctx, c, check(c, osthread.Other)); err != nil {
			t.Error(err)
		}
		task, err := e.Go(ctx, c, check(c, osthread.Other))
		if err != nil {
			t.Fatal(err)
		}
		if err := task.Wait(ctx); err != nil {
			t.Error(err)
		}
	}
	if err := e.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// The demoted threads exit with their workers: none is left to run
	// unrelated goroutines at SCHED_IDLE.
	deadline := time.Now().Add(5 * time.Second)
	batchTIDs.Range(func(k, _ any) bool {
		for {
			if _, err := os.Stat(fmt.Sprintf("/proc/self/task/%d", k.(int))); err != nil {
				return true
			}
			if time.Now().After(deadline) {
				t.Errorf("demoted thread %d outlived Close", k.(int))
				return true
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
}

func TestNoDemotionKeepsBatchOnNormalThreads(t *testing.T) {
	e := newExec(t, Options{Slots: 1})
	err := e.Do(context.Background(), Batch, func(context.Context) error {
		s, _, err := policyHere()
		if err == nil && s.Policy != osthread.Other {
			err = fmt.Errorf("policy %s", s.Policy)
		}
		return err
	})
	if err != nil {
		t.Error(err)
	}
}

func TestSparePKeepsBatchBelowGOMAXPROCS(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("needs GOMAXPROCS >= 2")
	}
	slots := runtime.GOMAXPROCS(0)
	e := newExec(t, Options{Slots: slots, Batch: BatchOptions{SpareP: true}})
	var running, peak atomic.Int64
	var wg sync.WaitGroup
	fn := func(context.Context) error {
		n := running.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		spin(300 * time.Microsecond)
		running.Add(-1)
		return nil
	}
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%2 == 0 {
				e.Do(context.Background(), Batch, fn)
				return
			}
			if t, err := e.TryGo(context.Background(), Background, fn); err == nil {
				t.Wait(context.Background())
			}
		}()
	}
	// Interactive work still gets the spare slot while batch is capped.
	interactiveRan := make(chan struct{})
	go func() {
		e.Do(context.Background(), Interactive, func(context.Context) error { close(interactiveRan); return nil })
	}()
	wg.Wait()
	<-interactiveRan
	if p := peak.Load(); p > int64(slots-1) {
		t.Errorf("batch peak concurrency %d, want <= GOMAXPROCS-1 = %d", p, slots-1)
	}
}

func TestCriticalLaneRunsCriticalTasksOnItsThreads(t *testing.T) {
	e := newExec(t, Options{Slots: 1, CriticalLane: &osthread.Options{Threads: 1, Sched: osthread.Sched{CPUs: []int{0}}}})
	err := e.Do(context.Background(), Critical, func(ctx context.Context) error {
		s, _, err := policyHere()
		if err != nil {
			return err
		}
		if fmt.Sprint(s.CPUs) != "[0]" {
			return fmt.Errorf("critical task affinity %v, want [0]", s.CPUs)
		}
		return Checkpoint(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	if e.Stats().Free != 1 {
		t.Errorf("slot not released: %+v", e.Stats())
	}
	if _, err := New(Options{Slots: 1, CriticalLane: &osthread.Options{Threads: 0}}); err == nil {
		t.Error("invalid lane options accepted")
	}
}

// TestDemotionIsOptIn: Batch runs SCHED_IDLE only with Demote. The
// starvation guard may undo a demotion where other processes starve the
// demoted thread (it promotes it, or suspends demotion process-wide): an
// attempt the guard acted in says nothing about the option, so it is run
// again (the suspension ended first), up to a bound; a thread that runs
// SCHED_OTHER under Demote with no action of the guard fails.
func TestDemotionIsOptIn(t *testing.T) {
	for _, tt := range []struct {
		demote, spare bool
		want          osthread.Policy
	}{
		{false, false, osthread.Other},
		{false, true, osthread.Other},
		{true, false, osthread.Idle},
		{true, true, osthread.Idle},
	} {
		t.Run(fmt.Sprintf("Demote %v, SpareP %v: batch runs %s", tt.demote, tt.spare, tt.want), func(t *testing.T) {
			const attempts = 5
			for range attempts {
				if demotionOptInOnce(t, tt.demote, tt.spare, tt.want) {
					return
				}
			}
			t.Skipf("the starvation guard acted in each of %d attempts: other processes starve SCHED_IDLE threads here", attempts)
		})
	}
}

// demotionOptInOnce is one attempt of TestDemotionIsOptIn, from a fresh
// process's suspension state: false when the batch task ran under the
// wrong policy and the guard had acted (a suspension or a promotion).
func demotionOptInOnce(t *testing.T, demote, spare bool, want osthread.Policy) bool {
	t.Helper()
	suspensionpkg.Resume() // process-wide: start as a fresh process would
	e, err := New(Options{Slots: 2, Batch: BatchOptions{SpareP: spare, Demote: demote}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	}()
	var got osthread.Policy
	err = e.Do(context.Background(), Batch, func(context.Context) error {
		s, _, err := policyHere()
		got = s.Policy
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	st := e.Stats()
	if st.Demotion.Enabled != (want == osthread.Idle) {
		t.Errorf("Stats.Demotion.Enabled %v", st.Demotion.Enabled)
	}
	if got == want {
		return true
	}
	time.Sleep(20 * time.Millisecond) // a guard that acted counts it just after
	if d := e.Stats().Demotion; want == osthread.Idle && d.Suspensions+d.Promotions > 0 {
		t.Logf("batch ran %s after the guard acted (%d suspensions, %d promotions); again", got, d.Suspensions, d.Promotions)
		return false
	}
	t.Fatalf("batch runs %s, want %s", got, want)
	return true
}

// Under Beside, a Batch task queued for the batch side's slots does not
// send an Interactive arrival through the door while the budget's side
// has a slot free: it takes the slot at once, as it would with no batch
// queued. (It was judged by the door instead, against a stale estimate,
// and refused: a server with batch clients waiting refused nearly every
// request while its budget's slots stood free.)
func TestBesideQueuedBatchLeavesInteractiveItsFreeSlot(t *testing.T) {
	e := newExec(t, Options{Slots: 1, Batch: BatchOptions{Beside: true}})
	ctx := context.Background()
	release, started := make(chan struct{}), make(chan struct{})
	running, err := e.Go(ctx, Batch, func(context.Context) error { close(started); <-release; return nil })
	if err != nil {
		t.Fatal(err)
	}
	<-started
	queued, err := e.Go(ctx, Batch, func(context.Context) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	waitQueued(t, e, Batch, 1)
	// Its expected run time is past its deadline: the door would refuse
	// it; a free slot takes it without asking.
	dctx, cancel := context.WithTimeout(WithTarget(ctx, Target{Service: time.Minute}), time.Second)
	defer cancel()
	ran := false
	if err := e.Do(dctx, Interactive, func(context.Context) error { ran = true; return nil }); err != nil || !ran {
		t.Errorf("Interactive Do beside a queued batch task: ran %v, err %v; want it run on the free slot", ran, err)
	}
	close(release)
	for _, tk := range []*Task{running, queued} {
		if err := tk.Wait(ctx); err != nil {
			t.Error(err)
		}
	}
}
