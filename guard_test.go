//go:build linux

package cpuwork

import (
	"context"
	"errors"
	"fmt"
	"os"
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
	e := newExec(t, Options{Batch: BatchOptions{Beside: true}, detect: detect, WatchInterval: time.Hour})
	g, ok := e.guard.(*guard)
	if !ok {
		t.Skip("no demotion on this platform")
	}
	if g.ownCPUs != 1.5 {
		t.Errorf("the guard weighs the process's CPU time against %v CPUs, want the quota's 1.5", g.ownCPUs)
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

// The guard reads a thread's state from field 3 of its stat file, after
// the command, which may hold spaces and parentheses.
func TestThreadRunnableReadsTheStateAfterTheCommand(t *testing.T) {
	for _, c := range []struct {
		stat string
		want bool
	}{
		{"4242 (worker) R 1 4242 0", true},
		{"4242 (a) b) R) S 1 4242 0", false},
		{"4242 (a (b) R) R 1 4242 0", true},
		{"4242 (cmd) S 1 4242 0", false},
		{"4242 (cmd)", false},
		{"", false},
	} {
		f, err := os.CreateTemp(t.TempDir(), "stat")
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString(c.stat)
		if got := threadRunnable(f, make([]byte, 256)); got != c.want {
			t.Errorf("threadRunnable(%q) = %v, want %v", c.stat, got, c.want)
		}
		f.Close()
	}
}

// Stats.Demotion is the guard's counters while demotion is enabled.
func TestDemotionStatsComeFromTheGuard(t *testing.T) {
	var g guard
	g.suspensions.Store(2)
	g.promotions.Store(3)
	g.retired.Store(1)
	g.starvedNs.Store(int64(5 * time.Millisecond))
	st := g.stats()
	if !st.Enabled || st.Suspensions != 2 || st.Promotions != 3 || st.Retired != 1 || st.StarvedTime != 5*time.Millisecond {
		t.Errorf("stats %+v", st)
	}
}

// Beside's guard averages others' CPU use over time, not over its ticks:
// on a loaded machine the ticks come late, and an average over ticks kept
// a thread starved by another process counted as starved by the process's
// own work for 300 ms (a full test run: the guard never fired). With the
// process using no CPU and its 2 CPUs all others', ticks 100 ms apart
// decide "others" at the first; ticks 5 ms apart after about 30 ms, as
// before.
func TestBesideGuardAveragesOthersOverTimeNotTicks(t *testing.T) {
	for _, c := range []struct {
		tick         time.Duration
		busyAfter    int // ticks still counted as own work
		notBusyAfter int // ticks by which others are seen
	}{
		{100 * time.Millisecond, 0, 1},
		{guardInterval, 3, 10},
	} {
		g := &guard{ownCPUs: 2}
		const p = int64(time.Second) // the process's CPU time never moves
		w := int64(time.Hour)
		g.weighOthers(p, w)
		for i := 1; i <= c.notBusyAfter; i++ {
			w += int64(c.tick)
			own := g.weighOthers(p, w)
			if i <= c.busyAfter && !own {
				t.Errorf("ticks %v apart: others seen after %d ticks, want after more than %d", c.tick, i, c.busyAfter)
			}
			if i == c.notBusyAfter && own {
				t.Errorf("ticks %v apart: after %d ticks of others taking both CPUs the starvation still counts as the process's own (others %.2f CPUs)", c.tick, i, g.others)
			}
		}
	}
}

// Beside's guard counts a demoted thread's starvation only while others
// could fill the CPUs a stop-the-world frees: about half of the process's
// CPUs. On 2 CPUs, a process using 1.6 of them beside a load generator
// (others 0.4) and one using 1.3 beside a CPU-bound process it competes
// with (others 0.7) leave a CPU free when they stop: their starvation is
// their own. A process held to 1 CPU (others 1.0, a neighbour as busy as
// itself) is not; under a 1.5-CPU quota half a CPU is the bound, as
// before. The guard once suspended demotion in every run of a server at
// twice its capacity beside its load generator.
func TestBesideGuardCountsOnlyANeighbourThatCouldFillTheCPUs(t *testing.T) {
	for _, c := range []struct {
		own, used float64 // the CPUs the process may run on, and uses
		ownWork   bool
	}{
		{2, 1.6, true},
		{2, 1.3, true},
		{2, 1.0, false},
		{2, 0, false},
		{1.5, 1.1, true},
		{1.5, 0.9, false},
		{1, 0.6, true},
		{1, 0.4, false},
		{8, 5, true},
		{8, 4, false},
	} {
		g := &guard{ownCPUs: c.own}
		p, w := int64(time.Second), int64(time.Hour)
		g.weighOthers(p, w)
		var own bool
		for range 200 { // 1 s of 5-ms ticks
			w += int64(guardInterval)
			p += int64(c.used * float64(guardInterval))
			own = g.weighOthers(p, w)
		}
		if own != c.ownWork {
			t.Errorf("%v CPUs, the process using %v (others %.2f): starvation counted as its own work %v, want %v",
				c.own, c.used, g.others, own, c.ownWork)
		}
	}
}
