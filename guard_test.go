//go:build linux

package cpuwork

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cpuwork/cpuwork/budget"
	suspensionpkg "github.com/cpuwork/cpuwork/internal/suspension"
	"github.com/cpuwork/cpuwork/osthread"
)

// A demoted worker pinned to one CPU beside a CPU-bound process pinned to
// the same CPU is starved by the kernel while it holds a P: the guard must
// notice, suspend demotion, and the worker's next task must run at the
// thread's original policy (promoted in place with CAP_SYS_NICE, or on a
// fresh thread without). No timing is asserted beyond generous bounds.
func TestStarvationGuardUndoesDemotionOfAStarvedWorker(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("needs 2 CPUs: the test pins a competitor to CPU 1")
	}
	cpu := []int{1}
	// The suspension is process-wide: start as a fresh process would
	// (another test's guard may have fired), and end it for the others.
	suspensionpkg.Resume()
	defer suspensionpkg.Resume()
	e := newExec(t, Options{Slots: 1, Batch: BatchOptions{Demote: true}, batchSched: osthread.Sched{Policy: osthread.Idle, CPUs: cpu}})
	pinnedHog(t, cpu[0])
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	var sawIdle bool
	err := e.Do(ctx, Batch, func(ctx context.Context) error {
		s, _, err := policyHere()
		sawIdle = err == nil && s.Policy == osthread.Idle
		for e.Stats().Demotion.Suspensions == 0 {
			if time.Now().After(deadline) {
				return errors.New("the guard never fired while the worker was starved")
			}
			spin(100 * time.Microsecond)
			Checkpoint(ctx)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The guard may starve-detect and promote the thread in place before
	// the task's first line runs (it is busy from its start, pinned beside
	// the competitor): then the task first saw the promoted policy.
	if !sawIdle && e.Stats().Demotion.Promotions == 0 {
		t.Fatal("the first batch task did not run on a SCHED_IDLE thread")
	}
	// Demotion is suspended (for at least guardCooldown): the next task runs
	// at the original policy.
	err = e.Do(ctx, Batch, func(context.Context) error {
		s, tid, err := policyHere()
		if err == nil && s.Policy != osthread.Other {
			err = fmt.Errorf("after the guard fired, batch runs %s on thread %d", s.Policy, tid)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	st := e.Stats().Demotion
	if st.Suspensions < 1 || st.Active || st.Promotions+st.Retired < 1 || st.StarvedTime <= 0 {
		t.Fatalf("demotion stats %+v", st)
	}
	t.Logf("demotion stats %+v", st)
}

// Under Beside, a demoted batch thread starved while the process itself
// keeps the CPUs busy is the design (batch gets what the budget's slots
// leave): the guard leaves it demoted. Starved while the process leaves
// the CPUs to another, the guard fires as without Beside. The process's
// CPU time is faked (all CPUs busy, or none) so that only the guard's
// decision is tested; the starvation is real: a CPU-bound process pinned
// to the worker's CPU.
func TestBesideGuardSparesStarvationByTheProcesssOwnWork(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("needs 2 CPUs: the test pins a competitor to CPU 1")
	}
	cpu := []int{1}
	pinnedHog(t, cpu[0])
	for _, ownBusy := range []bool{true, false} {
		suspensionpkg.Resume()
		start := time.Now()
		procCPU := func() time.Duration {
			if ownBusy {
				return time.Duration(float64(time.Since(start)+time.Second) * float64(runtime.NumCPU()))
			}
			return time.Second // the process uses no CPU
		}
		e := newExec(t, Options{Slots: 1, Batch: BatchOptions{Beside: true},
			batchSched: osthread.Sched{Policy: osthread.Idle, CPUs: cpu}, processCPU: procCPU})
		ctx := context.Background()
		// Starved for 300 ms (the guard fires after 4 ms of it), or until
		// the guard fires.
		err := e.Do(ctx, Batch, func(ctx context.Context) error {
			for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end) && e.Stats().Demotion.Suspensions == 0; {
				spin(100 * time.Microsecond)
				Checkpoint(ctx)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		st := e.Stats().Demotion
		t.Logf("own work busy %v: %+v", ownBusy, st)
		switch {
		case st.StarvedTime < 20*time.Millisecond && st.Suspensions == 0:
			// The kernel ran the worker after all (seen once in 65 runs
			// beside three more CPU-bound processes): nothing to judge.
			t.Skipf("own work busy %v: the worker was starved for only %v, so the case shows nothing", ownBusy, st.StarvedTime)
		case ownBusy && (st.Suspensions != 0 || !st.Active):
			t.Errorf("starved by the process's own work, the guard suspended demotion: %+v", st)
		case !ownBusy && st.Suspensions == 0:
			t.Errorf("starved by another process, the guard did not fire: %+v", st)
		}
		e.Close(ctx)
	}
	suspensionpkg.Resume()
}

// Under a CPU quota the CPUs Beside's guard weighs the process's CPU time
// against are the quota's: a 1.5-CPU process that uses its quota leaves
// the rest of a 2-CPU machine idle, not to a neighbour.
func TestBesideGuardWeighsAgainstTheQuota(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("needs 2 CPUs for a quota below them")
	}
	dir := t.TempDir()
	detect := func() (budget.Budget, error) {
		return budget.Budget{Cores: 1.5, GOMAXPROCS: 4, Affinity: runtime.NumCPU(), Source: budget.SourceCgroupV1,
			Limits: []budget.Limit{{Dir: dir, Period: 100 * time.Millisecond, Cores: 1.5}}}, nil
	}
	b, err := detect()
	if err != nil {
		t.Fatal(err)
	}
	if own := ownCPUs(b, true); own != 1.5 {
		t.Errorf("the guard weighs the process's CPU time against %v CPUs, want the quota's 1.5", own)
	}
	if own := ownCPUs(b, false); own != float64(runtime.NumCPU()) {
		t.Errorf("without a budget: %v CPUs, want the machine's %d", own, runtime.NumCPU())
	}
}

// pinnedHog starts a CPU-bound process pinned to cpu, killed when t ends.
func pinnedHog(t *testing.T, cpu int) {
	hog := exec.Command("sh", "-c", "while :; do :; done")
	if err := hog.Start(); err != nil {
		t.Skipf("cannot start a CPU-bound competitor: %v", err)
	}
	t.Cleanup(func() { hog.Process.Kill(); hog.Wait() })
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(hog.Process.Pid, &set); err != nil {
		t.Fatalf("pin the competitor: %v", err)
	}
}
