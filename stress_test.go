package cpuwork

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cpuwork/cpuwork/budget"
	"github.com/cpuwork/cpuwork/internal/admission"
	"github.com/cpuwork/cpuwork/internal/trace"
)

// TestStressEveryTaskRunsOnceOrItsSubmitterGetsAnError runs many short
// executor lifetimes, each with random options (slots, SpareP, demotion,
// queue limits), random submitters mixing Do, Go, TryGo, Call, For and For
// inside a task with Checkpoints from its chunks, across all classes, with
// random cancellations (before, while queued, at the moment of the grant,
// while re-queued at a Checkpoint), deadlines (and deadline-aware
// shedding), queue-wait targets, panics, runtime.Goexit,
// nested calls, SetSlots, and Close at a random moment with a random grace.
// Each task records how often it ran; each submitter what it got. Every
// task must run exactly once and return its own result, or run at most
// once and its submitter see an error; nothing may hang (a hang fails the
// test by its timeout) and the executor must end idle with every slot free.
//
// CPUWORK_STRESS_RUNS sets the number of runs (default 2000; 200 with
// -short) for a longer campaign.
func TestStressEveryTaskRunsOnceOrItsSubmitterGetsAnError(t *testing.T) {
	campaign(t, 2000, 200, false)
}

// campaign runs stress for runs seeds from a random base (short with
// -short; CPUWORK_STRESS_RUNS and CPUWORK_STRESS_SEED override both),
// flipping as stress takes it, and stops at the first failing seed.
func campaign(t *testing.T, runs, short int, flipping bool) {
	if testing.Short() {
		runs = short
	}
	if s := os.Getenv("CPUWORK_STRESS_RUNS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("CPUWORK_STRESS_RUNS=%q: want a positive integer", s)
		}
		runs = n
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("CPUWORK_STRESS_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (CPUWORK_STRESS_SEED=%d reproduces), %d runs", seed, seed, runs)
	for i := range runs {
		stress(t, seed+uint64(i), flipping)
		if t.Failed() {
			t.Fatalf("run with seed %d failed", seed+uint64(i))
		}
	}
}

type outcome struct {
	inBody   *atomic.Int32 // bodies of the run's tasks running now
	runs     atomic.Int32
	err      error
	reported atomic.Bool
	panics   bool
	goexits  bool
}

// TestStressCloseWithAFlippingBudget is the stress test with the
// options of a run in which Close returned drained while a task ran: no
// fixed slot count (slots from a budget that flips between 2 cores and
// a fractional quota, watched every 200 µs), accounting off, and For
// loops bound to one slot; the rest random. CPUWORK_STRESS_RUNS sets
// the number of runs here too (default 300; 50 with -short).
func TestStressCloseWithAFlippingBudget(t *testing.T) {
	campaign(t, 300, 50, true)
}

// stress runs one executor lifetime with options drawn from seed;
// flipping forces the case of TestStressCloseWithAFlippingBudget.
func stress(t *testing.T, seed uint64, flipping bool) {
	r := rand.New(rand.NewPCG(seed, 7))
	o := Options{
		Slots: 1 + r.IntN(4),
		Batch: BatchOptions{SpareP: r.IntN(3) == 0, Demote: r.IntN(3) == 0, Beside: r.IntN(4) == 0},
	}
	for c := range o.Classes {
		o.Classes[c].QueueLimit = 1 + r.IntN(8)
	}
	if r.IntN(3) == 0 { // queue-wait targets: shedding at the door
		for c := range o.Classes {
			o.Classes[c].MaxQueueWait = time.Duration(r.IntN(300)) * time.Microsecond
		}
	}
	if r.IntN(3) == 0 { // latency targets: earliest due first, refusals at the door and at the head
		for c := range o.Classes {
			o.Classes[c].LatencyTarget = time.Duration(r.IntN(2000)) * time.Microsecond
		}
	}
	o.forMaxSlots = r.IntN(4)
	o.Account.Every = []int{-1, 0, 1}[r.IntN(3)] // off, sampled, every task (hand-overs and Goscheds of accounted tasks)
	if flipping {
		o.forMaxSlots, o.Account.Every = 1, -1
	}
	if r.IntN(3) == 0 {
		// Requests recorded in a small ring, or observed (run at once,
		// no slot: Close must still wait for them), while the ring is
		// read (below).
		o.Record = RecordOptions{Requests: r.IntN(16), Observe: r.IntN(2) == 0}
		if !o.Record.Observe {
			o.Record.Requests++
		}
	}
	if r.IntN(2) == 0 {
		// Slow tasks accounted up to a per-second bound (its window's
		// reset races with concurrent takes).
		o.Account.SlowWait, o.Account.SlowLimit = time.Duration(r.IntN(500))*time.Microsecond, []int{-1, 0, 3}[r.IntN(3)]
	}
	if r.IntN(4) == 0 || flipping {
		// Slots from a budget that flips between none and a fractional
		// quota: the watcher makes the fractional pacer while tasks run
		// (a quota applied after New), reconfigures it, and Close stops
		// it wherever it is.
		o.Slots, o.WatchInterval = 0, 200*time.Microsecond
		dir, flip := t.TempDir(), new(atomic.Int32)
		o.detect = func() (budget.Budget, error) {
			if flip.Add(1)%3 == 0 {
				return budget.Budget{Cores: 2, GOMAXPROCS: 2, Affinity: 2, Source: budget.SourceAffinity}, nil
			}
			q := []float64{1.5, 1.25, 2.5}[r2(seed, flip.Load())]
			return budget.Budget{Cores: q, GOMAXPROCS: 3, Affinity: 3, Source: budget.SourceCgroupV1,
				Limits: []budget.Limit{{Dir: dir, Period: 10 * time.Millisecond, Cores: q}}}, nil
		}
	}
	e, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	if r.IntN(2) == 0 {
		// Arrivals on a watched connection: Checkpoints park for the
		// network among hand-overs, requeues and Close.
		defer stressNetwork(t)()
	}
	submitters, perSubmitter := 2+r.IntN(4), 5+r.IntN(20)
	outs := make([]*outcome, submitters*perSubmitter)
	var wg sync.WaitGroup
	closeAt := r.IntN(submitters*perSubmitter + 1)
	var submitted atomic.Int64
	var inBody atomic.Int32
	closedEarly := make(chan int32, 1)
	closeDone := make(chan error, 1)
	var closeOnce sync.Once
	for s := range submitters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(s)+100))
			for i := range perSubmitter {
				o := &outcome{inBody: &inBody}
				outs[s*perSubmitter+i] = o
				if submitted.Add(1) == int64(closeAt) {
					closeOnce.Do(func() {
						grace := time.Duration(r.IntN(1500)) * time.Microsecond
						go func() {
							ctx, cancel := context.WithTimeout(context.Background(), grace)
							defer cancel()
							err := e.Close(ctx)
							if n := inBody.Load(); err == nil && n != 0 {
								closedEarly <- n // Close reports drained while tasks run
							}
							closeDone <- err
						}()
					})
				}
				if r.IntN(30) == 0 {
					e.SetSlots(1 + r.IntN(4))
				}
				runOne(e, r, o)
			}
		}()
	}
	stopResizing, stopSpending, stopTracing := func() {}, func() {}, func() {}
	if o.Record != (RecordOptions{}) {
		stopTracing = every50us(func(int) {
			var b bytes.Buffer
			if err := e.WriteTrace(&b); err != nil {
				t.Errorf("WriteTrace: %v", err)
			} else if _, _, err := trace.Read(&b); err != nil && !strings.Contains(err.Error(), "no request") {
				t.Errorf("the trace written does not read back: %v", err)
			}
		})
	}
	if r.IntN(4) == 0 {
		// The slot count changes under the releases (a shrink between a
		// release's add and its capacity check once lost a slot).
		stopResizing = every50us(func(i int) { e.SetSlots(1 + (i*7+int(seed))%4) })
	}
	if r.IntN(4) == 0 {
		// The CPU budget spent and not, by turns (the fractional pacer's
		// signal): a shedding class refuses at its door with its queue
		// empty and at its head (admission's spentLocked).
		stopSpending = every50us(func(i int) { e.g.Pacer().SetBudgetSpent(i%2 == 0) })
	}
	wg.Wait()
	stopResizing()
	stopSpending()
	stopTracing()
	closeOnce.Do(func() { closeDone <- nil })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := e.Close(ctx); err != nil {
		t.Fatalf("seed %d: final Close: %v (stats %+v)", seed, err, e.Stats())
	}
	<-closeDone
	select {
	case n := <-closedEarly:
		t.Fatalf("seed %d: Close returned drained while %d tasks ran (options %+v)", seed, n, o)
	default:
	}
	st := e.Stats()
	if n := e.g.Snapshot(0).DoubleReleases; n != 0 {
		t.Fatalf("seed %d: %d slots released twice (options %+v)", seed, n, o)
	}
	if st.Free != st.Slots {
		t.Fatalf("seed %d: %d of %d slots free after Close (options %+v, stats %+v)", seed, st.Free, st.Slots, o, st)
	}
	if snap := e.g.Snapshot(1 << 20); snap.ActiveKeys != 0 || slices.ContainsFunc(snap.Keys, func(k admission.KeyStat) bool { return k.Queued != 0 }) {
		t.Fatalf("seed %d: keys with work in flight after Close: %d active, %+v", seed, snap.ActiveKeys, snap.Keys)
	}
	for c, cs := range st.Classes {
		if cs.Queued != 0 || cs.Running != 0 {
			t.Fatalf("seed %d: class %s has %d queued, %d running after Close", seed, Class(c), cs.Queued, cs.Running)
		}
	}
	for i, o := range outs {
		runs := o.runs.Load()
		if !o.reported.Load() {
			t.Fatalf("seed %d: task %d: submitter never got a result", seed, i)
		}
		var pe *PanicError
		switch {
		case runs > 1:
			t.Fatalf("seed %d: task %d ran %d times", seed, i, runs)
		case runs == 0 && o.err == nil:
			t.Fatalf("seed %d: task %d never ran and its submitter got no error", seed, i)
		case o.panics && runs == 1 && o.err == nil:
			t.Fatalf("seed %d: task %d panicked but its submitter got no error", seed, i)
		case o.goexits && runs == 1 && o.err == nil: // ErrGoexit, or an earlier error of the same For loop
			t.Fatalf("seed %d: task %d called Goexit but its submitter got %v", seed, i, o.err)
		case runs == 1 && o.err != nil && !errors.Is(o.err, errTask) && !errors.As(o.err, &pe) &&
			!errors.Is(o.err, context.Canceled) && !errors.Is(o.err, context.DeadlineExceeded) &&
			!errors.Is(o.err, ErrClosed) && !errors.Is(o.err, ErrGoexit):
			t.Fatalf("seed %d: task %d ran but got %v", seed, i, o.err)
		}
	}
}

var errTask = errors.New("task error")

// r2 picks one of three quotas from the seed and the budget read's count
// (detect runs on the watcher's goroutine: no shared rand).
func r2(seed uint64, n int32) int { return int((seed + uint64(n)) % 3) }

func runOne(e *Executor, r *rand.Rand, o *outcome) {
	c := Class(r.IntN(numClasses))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	switch r.IntN(8) {
	case 0: // cancelled at a random moment: before, while queued, at the grant, while running or re-queued
		delay := time.Duration(r.IntN(300)) * time.Microsecond
		go func() { time.Sleep(delay); cancel() }()
	case 1: // a deadline
		var dcancel context.CancelFunc
		ctx, dcancel = context.WithTimeout(ctx, time.Duration(r.IntN(500))*time.Microsecond)
		defer dcancel()
	case 2:
		if r.IntN(4) == 0 {
			cancel() // done before submission: must never run
		}
	case 3, 4: // a latency target: ordered by due, refused when it cannot be met (an objective: beyond the late budget)
		ctx = WithTarget(ctx, Target{Latency: time.Duration(r.IntN(3000)) * time.Microsecond,
			Service: time.Duration(r.IntN(400)) * time.Microsecond})
		if r.IntN(3) == 0 { // and a ctx deadline, binding or not: never let through past it
			var dcancel context.CancelFunc
			ctx, dcancel = context.WithTimeout(ctx, time.Duration(r.IntN(3000))*time.Microsecond)
			defer dcancel()
		}
	}
	if r.IntN(3) == 0 { // a key: ranked by its share, charged and given back on every path
		switch r.IntN(4) {
		case 0: // made up for this task, as a flood rotating keys does
			ctx = WithKey(ctx, fmt.Sprint("made-up-", r.Uint64()))
		case 1: // long: the table keeps a digest and a prefix
			ctx = WithKey(ctx, strings.Repeat("k", 100+r.IntN(1000)))
		default:
			ctx = WithKey(ctx, fmt.Sprint("key", r.IntN(4)))
		}
	}
	o.panics = r.IntN(25) == 0
	o.goexits = !o.panics && r.IntN(25) == 0
	failing := r.IntN(20) == 0
	work := time.Duration(r.IntN(300)) * time.Microsecond
	mode := r.IntN(6)
	// A nested call runs on the slot of the goroutine that runs body: the
	// task's, or in a For (modes 4 and 5) the chunk's, the caller's or a
	// helper's.
	nested := r.IntN(4) == 0
	// A goroutine body starts holds no slot: its Checkpoint only yields
	// the P, whatever the task does meanwhile.
	child := r.IntN(6) == 0
	body := func(ctx context.Context) error {
		o.inBody.Add(1)
		defer o.inBody.Add(-1)
		o.runs.Add(1)
		end := time.Now().Add(work)
		for time.Now().Before(end) {
			if err := Checkpoint(ctx); err != nil && !errors.Is(err, context.Canceled) &&
				!errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, ErrClosed) {
				return err
			}
		}
		if child {
			done := make(chan error, 1)
			go func() { done <- Checkpoint(ctx) }()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				return err
			}
		}
		if nested { // nested call on the same slot
			if err := e.Do(ctx, Critical, func(context.Context) error { return nil }); err != nil &&
				!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				return err
			}
		}
		switch {
		case o.panics:
			panic("stress panic")
		case o.goexits:
			runtime.Goexit()
		case failing:
			return errTask
		}
		return nil
	}
	report := func(err error) { o.err = err; o.reported.Store(true) }
	if o.goexits && mode < 2 && !c.runsOnWorker() || o.goexits && mode >= 4 {
		// Do of Critical/Interactive and For run fn on the submitter's own
		// goroutine: Goexit ends it. Run the submission on a goroutine of
		// its own; ErrGoexit stands for "the goroutine exited".
		done := make(chan struct{})
		returned := false
		go func() {
			defer close(done)
			submit(e, ctx, c, mode, r, body, report)
			returned = true
		}()
		<-done
		if !returned {
			report(ErrGoexit)
		}
		return
	}
	submit(e, ctx, c, mode, r, body, report)
}

func submit(e *Executor, ctx context.Context, c Class, mode int, r *rand.Rand, body func(context.Context) error, report func(error)) {
	switch mode {
	case 0, 1:
		report(e.Do(ctx, c, body))
	case 2:
		t, err := e.Go(ctx, c, body)
		if err != nil {
			report(err)
			return
		}
		<-t.Done()
		report(t.Wait(context.Background()))
	case 3:
		t, err := e.TryGo(ctx, c, body)
		if err != nil {
			report(err)
			return
		}
		report(t.Wait(context.Background()))
	case 4:
		// A For outside a task: its chunks run body once.
		var once sync.Once
		report(e.For(ctx, c, 1+r.IntN(64), func(lo, hi int) error {
			var err error
			once.Do(func() { err = body(ctx) })
			return err
		}))
	case 5:
		// For inside a task, its chunks calling Checkpoint with the task's
		// context from helpers (issue 9, defect 3).
		n := 1 + r.IntN(200)
		report(e.Do(ctx, c, func(tctx context.Context) error {
			var once sync.Once
			return e.For(tctx, c, n, func(lo, hi int) error {
				var err error
				once.Do(func() { err = body(tctx) })
				for range hi - lo {
					if cerr := Checkpoint(tctx); cerr != nil && err == nil {
						err = cerr
					}
				}
				return err
			})
		}))
	}
}

// stressNetwork sends a byte every ~200 µs to a watched echo listener
// until the returned stop is called.
func stressNetwork(t *testing.T) (stop func()) {
	addr, closeEcho := watchedEcho(t)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		b := []byte{1}
		for {
			select {
			case <-done:
				return
			case <-time.After(200 * time.Microsecond):
			}
			if _, err := c.Write(b); err != nil {
				return
			}
			if _, err := io.ReadFull(c, b); err != nil {
				return
			}
		}
	}()
	return func() { close(done); c.Close(); <-finished; closeEcho() }
}

// TestStressBesideBatchBacklogLeavesInteractiveItsSlots: under Beside,
// with every batch slot held and more batch tasks queued, up to Slots
// Interactive submitters at once always find a slot of their own side
// free and run at once, whatever the door would say of them (a declared
// run time past their deadline); then the batch backlog runs to its end.
// Random slot counts, submitters and backlogs; CPUWORK_STRESS_RUNS sets
// the runs (default 200; 50 with -short).
func TestStressBesideBatchBacklogLeavesInteractiveItsSlots(t *testing.T) {
	runs := 200
	if testing.Short() {
		runs = 50
	}
	if s := os.Getenv("CPUWORK_STRESS_RUNS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("CPUWORK_STRESS_RUNS=%q: want a positive integer", s)
		}
		runs = n
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	for i := range runs {
		r := rand.New(rand.NewPCG(seed+uint64(i), 11))
		slots := 1 + r.IntN(3)
		e, err := New(Options{Slots: slots, Batch: BatchOptions{Beside: true}})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		release := make(chan struct{})
		var started sync.WaitGroup
		var batch []*Task
		for j := range slots + 1 + r.IntN(4) {
			if j < slots {
				started.Add(1)
			}
			tk, err := e.Go(ctx, Batch, func(context.Context) error {
				if j < slots {
					started.Done()
				}
				<-release
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			batch = append(batch, tk)
		}
		started.Wait()
		waitQueued(t, e, Batch, len(batch)-slots)
		var wg sync.WaitGroup
		var refused atomic.Int64
		for range 1 + r.IntN(slots) {
			n := 1 + r.IntN(20)
			wg.Go(func() {
				for range n {
					dctx, cancel := context.WithTimeout(WithTarget(ctx, Target{Service: time.Minute}), time.Second)
					if err := e.Do(dctx, Interactive, func(context.Context) error { return nil }); err != nil {
						refused.Add(1)
					}
					cancel()
				}
			})
		}
		wg.Wait()
		close(release)
		for _, tk := range batch {
			if err := tk.Wait(ctx); err != nil {
				t.Errorf("seed %d: batch task: %v", seed+uint64(i), err)
			}
		}
		if err := e.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if n := refused.Load(); n != 0 {
			t.Fatalf("seed %d: %d Interactive tasks refused beside a batch backlog while their side had slots free", seed+uint64(i), n)
		}
	}
}

// every50us calls f(0), f(1), ... every 50 µs on a goroutine of its own
// until the returned stop is called; stop returns once it has ended.
func every50us(f func(i int)) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-quit:
				return
			case <-time.After(50 * time.Microsecond):
			}
			f(i)
		}
	}()
	return func() { close(quit); <-done }
}
