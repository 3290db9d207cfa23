package bench

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/cpuwork/cpuwork"
	"github.com/cpuwork/cpuwork/cmd/cpuwork/internal/workload"
	"golang.org/x/sync/errgroup"
)

// burstVariants are the ways of running N tasks that arrive at once, each
// bounded (except the baseline) to the budget's slot count P.
var burstVariants = []struct{ name, desc string }{
	{"goroutine", "a goroutine per task (the runtime time-slices them every 10 ms)"},
	{"semaphore", "a goroutine per task behind a channel semaphore of P"},
	{"errgroup", "errgroup.Group with SetLimit(P)"},
	{"pool", "P worker goroutines fed by a buffered channel (FIFO)"},
	{"cpuwork", "the docs' way for work submitted at once: Executor.For (Interactive) over the N tasks, one task per chunk here, on the caller's slot and every free one (warm goroutines, FIFO by index)"},
	{"cpuwork-do", "a goroutine per task calling Executor.Do (Interactive): how requests that arrive on their own goroutines are admitted"},
}

// burst runs n tasks of work w (each ~c long) that all arrive at t0, for
// every variant, alternated over rounds.
func (r *Runner) burst(name string, n int, c time.Duration, w workload.Workload) *Scenario {
	P := r.slots
	s := &Scenario{
		Name:     name,
		Baseline: "goroutine",
		Claim: fmt.Sprintf("%d tasks of ~%v arriving at once: bounding concurrency to P=%d cuts mean latency without losing throughput (C5: semaphore, avg latency 185 ms -> 1.85 ms; measured there from goroutine start, here from arrival)",
			n, c.Round(100*time.Microsecond), P),
	}
	for _, bv := range burstVariants {
		if r.runs(bv.name) {
			s.Variants = append(s.Variants, &Variant{Name: bv.name, Description: bv.desc, Valid: true})
		}
	}
	s.Variants = append(s.Variants, &Variant{Name: "pool" + aaSuffix, Description: aaDesc("pool"), Valid: true})
	var firstSum, makespanSum = map[string]float64{}, map[string]float64{}
	checks := func() []check { return burstChecks() }
	r.pairs(s, checks, func(round int) {
		for _, v := range r.shuffled(s.Variants) {
			r.step(fmt.Sprintf("%s: %s (pair %d)", name, v.Name, round+1))
			h, series, first, makespan, u, err := r.burstOnce(strings.TrimSuffix(v.Name, aaSuffix), n, w)
			if err != nil {
				v.Valid, v.Invalid = false, err.Error()
				continue
			}
			v.addRun(h, series, u)
			v.setRepeatExtra("service_s", u.serviceS)
			v.setRepeatExtra("makespan_s", makespan.Seconds())
			firstSum[v.Name] += first.Seconds()
			makespanSum[v.Name] += makespan.Seconds()
		}
	})
	ideal := float64(n) * c.Seconds() / float64(P)
	for _, v := range s.Variants {
		runs := float64(max(len(v.Repeats), 1))
		v.setExtra("first_result_s", firstSum[v.Name]/runs)
		v.setExtra("makespan_s", makespanSum[v.Name]/runs)
		v.setExtra("ideal_makespan_s", ideal)
		v.setExtra("makespan_over_ideal", makespanSum[v.Name]/runs/ideal)
		if ms := makespanSum[v.Name] / runs; ms > 0 {
			v.Throughput = float64(n) / ms
		}
	}
	s.ratios()
	cw := s.variant("cpuwork")
	// The task size as measured in this run: the mean of the tasks' own
	// run times in cpuwork's repeats (one task per slot, as in every
	// bounded variant), not the one-core calibration.
	if cMeas := median(cw.repeatExtras("service_s")); cMeas > 0 {
		// The ideal makespan at the measured task size, for every variant.
		ideal := float64(n) * cMeas / float64(P)
		for _, v := range s.Variants {
			v.setExtra("ideal_makespan_s", ideal)
			v.setExtra("makespan_over_ideal", v.Extra["makespan_s"]/ideal)
		}
		s.Claim = strings.Replace(s.Claim, fmt.Sprintf("~%v", c.Round(100*time.Microsecond)), fmt.Sprintf("%s (measured in this run)", ms(cMeas)), 1)
	}
	judgeChecks(s, checks())
	// The published claim (C5), reported beside the verdict: a semaphore
	// cuts mean latency to 0.01x goroutine-per-task, measured there from
	// the goroutine's start; judged here from arrival.
	c5 := evaluate(s, check{label: "C5's claim: mean latency", judged: "semaphore", against: []string{"goroutine"}, metric: "mean", limit: 0.01, goal: true})
	s.Notes = append(s.Notes, c5.line()+" (C5 measured from the goroutine's start, after the semaphore; here from arrival)")
	return s
}

// burstChecks: the way the docs recommend for work submitted at once
// (Executor.For over the tasks, on warm goroutines) against every bounded
// way a user would write, and the unbounded one, on mean latency and
// makespan.
func burstChecks() []check {
	alts := []string{"goroutine", "semaphore", "errgroup", "pool"}
	aa := [2]string{"pool", "pool" + aaSuffix}
	return []check{
		{label: "mean latency", judged: "cpuwork", against: alts, metric: "mean", aa: aa},
		{label: "makespan", judged: "cpuwork", against: alts, metric: "makespan_s", aa: aa},
	}
}

func (r *Runner) burstOnce(variant string, n int, w workload.Workload) (hist *histT, series [][2]float64, first, makespan time.Duration, u usage, err error) {
	var mu sync.Mutex
	var firstErr error
	done := make([]time.Duration, 0, n)
	m := startMeter()
	t0 := time.Now()
	rec := newRecorder(t0, n)
	h := rec.shard()
	var serviceNs int64 // sum of the tasks' own run times (start of w.Run to its end)
	finish := func(i int) {
		st := time.Now()
		e := w.Run(i)
		d := time.Since(t0)
		mu.Lock()
		serviceNs += int64(time.Since(st))
		if e != nil && firstErr == nil {
			firstErr = e
		}
		done = append(done, d)
		rec.record(h, t0.Add(d), d)
		mu.Unlock()
	}
	fail := func(err error) {
		mu.Lock()
		firstErr = err
		mu.Unlock()
	}
	var wg sync.WaitGroup
	closeExec, err := r.burstDispatch(variant, n, finish, fail, &wg)
	if err != nil {
		return nil, nil, 0, 0, u, err
	}
	defer closeExec()
	wg.Wait()
	u = m.stop()
	if firstErr != nil {
		return nil, nil, 0, 0, u, firstErr
	}
	if len(done) != n {
		return nil, nil, 0, 0, u, fmt.Errorf("%d of %d tasks finished", len(done), n)
	}
	first, makespan = done[0], done[0]
	for _, d := range done {
		first, makespan = min(first, d), max(makespan, d)
	}
	u.serviceS = float64(serviceNs) / 1e9 / float64(n)
	return rec.merged(), rec.series, first, makespan, u, nil
}

// burstDispatch starts the n tasks of a burst the variant's way, each
// running finish(i) (wg counts the goroutines it starts; fail records a
// submission's error), and returns what closes the variant's executor
// once the burst is done.
func (r *Runner) burstDispatch(variant string, n int, finish func(int), fail func(error), wg *sync.WaitGroup) (closeExec func(), err error) {
	closeExec = func() {}
	switch variant {
	case "goroutine":
		for i := range n {
			wg.Add(1)
			go func() { defer wg.Done(); finish(i) }()
		}
	case "semaphore":
		sem := make(chan struct{}, r.slots)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				finish(i)
				<-sem
			}()
		}
	case "errgroup":
		var g errgroup.Group
		g.SetLimit(r.slots)
		for i := range n {
			g.Go(func() error { finish(i); return nil })
		}
		g.Wait()
	case "pool":
		ch := make(chan int, n)
		for i := range n {
			ch <- i
		}
		close(ch)
		for range r.slots {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range ch {
					finish(i)
				}
			}()
		}
	case "cpuwork":
		e, cerr := r.executor(n)
		if cerr != nil {
			return nil, cerr
		}
		closeExec = func() { e.Close(context.Background()) }
		if err := e.For(context.Background(), cpuwork.Interactive, n, func(lo, hi int) error {
			for i := lo; i < hi; i++ {
				finish(i)
			}
			return nil
		}); err != nil {
			fail(err)
		}
	case "cpuwork-do":
		e, cerr := r.executor(n)
		if cerr != nil {
			return nil, cerr
		}
		closeExec = func() { e.Close(context.Background()) }
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := e.Do(context.Background(), cpuwork.Interactive, func(context.Context) error { finish(i); return nil }); err != nil {
					fail(err)
				}
			}()
		}
	default:
		return nil, fmt.Errorf("unknown burst variant %q", variant)
	}
	return closeExec, nil
}

// executor returns a fresh executor with the runner's slot count and
// queues deep enough for n tasks (the scenarios measure latency, not
// shedding).
func (r *Runner) executor(n int) (*cpuwork.Executor, error) {
	var cl [4]cpuwork.ClassOptions
	for i := range cl {
		cl[i].QueueLimit = max(n, 1024)
	}
	return cpuwork.New(cpuwork.Options{Slots: r.slots, Classes: cl, WatchInterval: -1})
}
