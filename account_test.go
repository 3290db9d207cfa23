package cpuwork

import (
	"context"
	"math"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cpuwork/cpuwork/account"
	"github.com/cpuwork/cpuwork/budget"
)

// spinChecked runs about d of CPU work calling Checkpoint every ~20 µs.
func spinChecked(ctx context.Context, d time.Duration) {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		x := uint64(1)
		for i := range 20_000 {
			x = x*6364136223846793005 + uint64(i)
		}
		sinkU.Store(x)
		Checkpoint(ctx)
	}
}

// accountOne runs fn as one Interactive task of e (every task accounted)
// and returns its account and the latency seen from outside.
func accountOne(t *testing.T, e *Executor, ctx context.Context, got chan account.Task, fn func(context.Context) error) (account.Task, time.Duration) {
	t.Helper()
	var end time.Time
	t0 := time.Now()
	if err := e.Do(ctx, Interactive, func(ctx context.Context) error {
		err := fn(ctx)
		end = time.Now()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// Until the task's end, which the account ends at too: what follows
	// (the slot's release, the return from Do) may wait for a P behind a
	// busy goroutine and is not the task's latency.
	outside := end.Sub(t0)
	select {
	case a := <-got:
		return a, outside
	case <-time.After(10 * time.Second):
		t.Fatal("no account for the task")
	}
	return account.Task{}, 0
}

// checkSum: the parts sum to Wall exactly, and Wall is the latency seen
// from outside (from before Do to the end of the task's function) within
// 5 % or 3 ms either way (the account's clock starts inside Do and stops
// after its own readings at the task's end).
func checkSum(t *testing.T, a account.Task, outside time.Duration) {
	t.Helper()
	var sum time.Duration
	for _, p := range a.Parts {
		if p < 0 {
			t.Errorf("negative part in %+v", a)
		}
		sum += p
	}
	if sum != a.Wall {
		t.Errorf("parts sum to %v, wall %v", sum, a.Wall)
	}
	if d := a.Wall - outside; float64(max(d, -d)) > max(0.05*float64(outside), float64(3*time.Millisecond)) {
		t.Errorf("wall %v, %v seen from outside: want within 5 %%", a.Wall, outside)
	}
}

func largest(a account.Task) account.Part {
	best := account.Part(0)
	for p := range account.Part(account.NumParts) {
		if a.Parts[p] > a.Parts[best] {
			best = p
		}
	}
	return best
}

func accountExec(t *testing.T, o Options) (*Executor, chan account.Task) {
	got := make(chan account.Task, 64)
	o.Account = account.Options{Every: 1, OnTask: func(a account.Task) { got <- a }}
	return newExec(t, o), got
}

func TestAQueuedTaskIsMostlyQueueWait(t *testing.T) {
	e, got := accountExec(t, Options{Slots: 1})
	release := hold(t, e, 1)
	go func() { time.Sleep(60 * time.Millisecond); release() }()
	t0 := time.Now()
	if err := e.Do(context.Background(), Interactive, func(ctx context.Context) error {
		spinChecked(ctx, 5*time.Millisecond)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	outside := time.Since(t0)
	// Two accounts: the holding task's (a run of 60 ms or more) and this
	// one's (a run of 5 ms). They can arrive in either order, and their
	// End too: each is taken after its task released its slot, and the
	// holder's goroutine may be descheduled past this task's end. This
	// one's is the shorter run.
	var a account.Task
	for range 2 {
		select {
		case b := <-got:
			if a.Run == 0 || b.Run < a.Run {
				a = b
			}
		case <-time.After(10 * time.Second):
			t.Fatal("missing accounts")
		}
	}
	checkSum(t, a, outside)
	if largest(a) != account.QueueWait || a.Parts[account.QueueWait] < 40*time.Millisecond {
		t.Errorf("queued 60 ms behind a held slot: %+v, want queue_wait the largest part", a)
	}
}

func TestASpinningTaskIsOnCPUAndSumsToItsLatency(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("on-CPU time comes from Linux's per-thread schedstat")
	}
	e, got := accountExec(t, Options{Slots: 1})
	a, outside := accountOne(t, e, context.Background(), got, func(ctx context.Context) error {
		spinChecked(ctx, 30*time.Millisecond)
		return nil
	})
	checkSum(t, a, outside)
	t.Logf("%+v", a)
	// On a loaded machine the kernel takes some of it: judged is that the
	// CPU the task used is there and that no part is missing or doubled.
	if a.Parts[account.OnCPU] < 5*time.Millisecond {
		t.Errorf("30 ms of spinning: on_cpu %v", a.Parts[account.OnCPU])
	}
	// A whole account explains most of a spinning task's run on its
	// thread (the rest: waits in Go's run queue after the runtime
	// preempted it, which no reading sees, and are other).
	if a.Partial == "" && a.Parts[account.OnCPU]+a.Parts[account.KernelRunQueue]+a.Parts[account.Throttled] < a.Run/2 {
		t.Errorf("a whole account of a spinning task: on_cpu + run delay %v of a %v run", a.Parts[account.OnCPU]+a.Parts[account.KernelRunQueue], a.Run)
	}
}

func TestSlowTasksHistogramsAndStatsCarryTheAccounts(t *testing.T) {
	e, got := accountExec(t, Options{Slots: 1})
	for _, d := range []time.Duration{time.Millisecond, 8 * time.Millisecond, 3 * time.Millisecond} {
		accountOne(t, e, context.Background(), got, func(ctx context.Context) error {
			spinChecked(ctx, d)
			return nil
		})
	}
	stats := e.Stats()
	slow := stats.SlowTasks
	if len(slow) != 3 || slow[0].Wall < slow[1].Wall || slow[1].Wall < slow[2].Wall {
		t.Fatalf("SlowTasks %+v: want 3, slowest first", slow)
	}
	st := stats.Classes[Interactive]
	if st.Accounted != 3 || st.Parts[account.QueueWait].Count != 3 {
		t.Errorf("stats: %d accounted, %+v", st.Accounted, st.Parts)
	}
	h := st.Parts[account.Other]
	if n := len(h.Cumulative); n == 0 || h.Cumulative[n-1] != 3 {
		t.Errorf("Parts[other]: %+v, want 3 observations", h)
	}
	if h := stats.Classes[Batch].Parts[account.Other]; len(h.Cumulative) != 0 || h.Count != 0 {
		t.Errorf("Parts of a class with no accounts: %+v", h)
	}
}

func TestAccountingOffAndSlowWait(t *testing.T) {
	got := make(chan account.Task, 8)
	e := newExec(t, Options{Slots: 1, Account: account.Options{Every: -1, OnTask: func(a account.Task) { got <- a }}})
	e.Do(context.Background(), Interactive, emptyTask)
	if len(got) != 0 || e.Stats().SlowTasks != nil || e.Stats().Classes[Interactive].Accounted != 0 {
		t.Error("Every < 0 accounted a task")
	}
	// SlowWait: a task that waited at least 20 ms is accounted although
	// Every would almost never pick it.
	e2 := newExec(t, Options{Slots: 1, Account: account.Options{Every: 1 << 30, SlowWait: 20 * time.Millisecond,
		OnTask: func(a account.Task) { got <- a }}})
	e2.Do(context.Background(), Interactive, emptyTask) // no wait: not accounted
	release := hold(t, e2, 1)
	go func() { time.Sleep(40 * time.Millisecond); release() }()
	e2.Do(context.Background(), Interactive, emptyTask)
	select {
	case a := <-got:
		if a.Parts[account.QueueWait] < 20*time.Millisecond {
			t.Errorf("accounted %+v", a)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the slow task was not accounted")
	}
}

// A task during forced collections: its gc part is the stop-the-world
// time during its run, checked against the runtime's exact pause total
// (debug.ReadGCStats) around it; the histogram-based sum is within its
// bucket precision.
func TestATaskDuringForcedGCsHasTheirPausesInGC(t *testing.T) {
	e, got := accountExec(t, Options{Slots: 1})
	var before, after debug.GCStats
	debug.ReadGCStats(&before)
	a, outside := accountOne(t, e, context.Background(), got, func(ctx context.Context) error {
		for range 30 {
			runtime.GC()
		}
		return nil
	})
	debug.ReadGCStats(&after)
	checkSum(t, a, outside)
	stw := after.PauseTotal - before.PauseTotal
	t.Logf("stw %v, %+v", stw, a)
	if a.Parts[account.GC] == 0 || stw == 0 {
		t.Fatalf("30 forced collections: gc part %v, pauses %v", a.Parts[account.GC], stw)
	}
	if d := a.Parts[account.GC] - stw; d > stw/2+100*time.Microsecond || -d > stw/2+100*time.Microsecond {
		t.Errorf("gc part %v, the runtime's pause total %v", a.Parts[account.GC], stw)
	}
}

// Under overload every task waits: SlowWait accounts at most SlowLimit of
// them per one-second window the burst spans, and all of them with
// SlowLimit < 0.
func TestSlowWaitAccountsAtMostSlowLimitPerSecond(t *testing.T) {
	for _, tc := range []struct {
		limit    int
		min, max int64 // max < 0: SlowLimit per window spanned
	}{{10, 1, -1}, {-1, 200, 200}} {
		var n atomic.Int64
		e := newExec(t, Options{Slots: 1, Classes: [numClasses]ClassOptions{Interactive: {QueueLimit: 1000}}, Account: account.Options{Every: 1 << 30, SlowWait: time.Nanosecond, SlowLimit: tc.limit,
			OnTask: func(account.Task) { n.Add(1) }}})
		release := hold(t, e, 1)
		var wg sync.WaitGroup
		for range 200 {
			wg.Go(func() {
				if err := e.Do(context.Background(), Interactive, emptyTask); err != nil {
					t.Error(err)
				}
			})
		}
		for e.Stats().Classes[Interactive].Queued < 200 {
			time.Sleep(time.Millisecond)
		}
		sec0 := now() / int64(time.Second)
		release()
		wg.Wait()
		if tc.max < 0 {
			tc.max = int64(tc.limit) * (now()/int64(time.Second) - sec0 + 1)
		}
		if got := n.Load(); got < tc.min || got > tc.max {
			t.Errorf("SlowLimit %d: %d of 200 waiting tasks accounted, want %d to %d", tc.limit, got, tc.min, tc.max)
		}
	}
}

func TestAccountShareBound(t *testing.T) {
	if want := uint64(math.Round(1 << 32 * accountShare / accountCost)); shareBelow != want {
		t.Errorf("shareBelow %d, want 2^32 * %v / %v = %d", shareBelow, accountShare, accountCost, want)
	}
}

// The random one in Every: about 1/Every of 2^20 admissions on the fast
// path (SplitMix64 of the admission count) and of 2^20 queued tasks
// (the runtime's generator); at the default, fewer where the class's
// average slot time is so short that one in Every would cost more than
// accountShare of it; a value set explicitly is kept exactly.
func TestAccountingChoosesOneInEveryAndFewerOfShortTasksAtTheDefault(t *testing.T) {
	const n = 1 << 20
	count := func(a *accountant, avgSlot int64, admitted bool) int {
		c := 0
		for i := range uint64(n) {
			if (admitted && a.pickAdmitted(i+1, avgSlot)) || (!admitted && a.pickQueued(0, avgSlot)) {
				c++
			}
		}
		return c
	}
	def := newAccountant(account.Options{}, budget.Budget{}, false)
	set := newAccountant(account.Options{Every: defaultAccountEvery}, budget.Budget{}, false)
	all := newAccountant(account.Options{Every: 1}, budget.Budget{}, false)
	short := int64(100) // ns: 1 % of it over accountCost is 1 in 13,000
	for _, c := range []struct {
		name    string
		a       *accountant
		avgSlot int64
		want    float64
	}{
		{"default, 1 ms tasks", def, int64(time.Millisecond), n / defaultAccountEvery},
		{"default, slot time not measured yet", def, 0, n / defaultAccountEvery},
		{"default, 100 ns tasks", def, short, n * float64(short) * accountShare / accountCost},
		{"Every set to the default, 100 ns tasks", set, short, n / defaultAccountEvery},
		{"Every 1", all, short, n},
	} {
		for _, admitted := range []bool{true, false} {
			got := float64(count(c.a, c.avgSlot, admitted))
			// Binomial: within 6 standard deviations (and exact for p = 1).
			p := c.want / n
			if sd := math.Sqrt(n * p * (1 - p)); math.Abs(got-c.want) > 6*sd {
				t.Errorf("%s (fast path %v): %v chosen of %d, want %.0f ± %.0f", c.name, admitted, got, n, c.want, 6*sd)
			}
		}
	}
}

// The slowest-tasks window keeps the slowest accounts, slowest first,
// whatever order they come in, and turns away the faster ones without
// its lock once it is full.
func TestSlowestKeepsTheSlowestInOrder(t *testing.T) {
	s := slowest{window: int64(time.Hour)}
	walls := []int{5, 1, 9, 3, 7, 2, 8, 6, 4, 10, 0, 11, 3}
	for _, w := range walls {
		s.add(account.Task{Wall: time.Duration(w)}, 1)
	}
	got := s.get(2)
	want := []time.Duration{11, 10, 9, 8, 7, 6, 5, 4}
	if len(got) != len(want) {
		t.Fatalf("kept %d accounts, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].Wall != want[i] {
			t.Fatalf("kept %v at %d, want %v (all: %v)", got[i].Wall, i, want[i], got)
		}
	}
	if f := s.floor.Load(); f != 4 {
		t.Errorf("floor %d, want 4 (the 8th slowest)", f)
	}
}
