package bench

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cpuwork/cpuwork"
	"github.com/cpuwork/cpuwork/internal/workload"
	"github.com/cpuwork/cpuwork/osthread"
)

var priorityVariants = []struct{ name, desc string }{
	{"goroutines", "critical requests as plain goroutines beside GOMAXPROCS batch goroutines"},
	{"two-pools", "a 1-worker critical pool and a GOMAXPROCS-worker batch pool"},
	{"os-thread-pool", "C4's OS-thread pool: critical on a goroutine locked to a thread pinned to the last CPU at SCHED_FIFO 50, else nice -10, as permitted"},
	{"hybrid", "C4's hybrid: GOMAXPROCS = NumCPU/2 plus NumCPU/2 dedicated locked threads (SCHED_FIFO or nice -10) for critical"},
	{"cpuwork", "Executor defaults: Do(Critical); Do(Batch) on SCHED_IDLE threads with Checkpoint every ~50 µs"},
	{"cpuwork-nodemote", "Executor with NoDemotion: batch on ordinary goroutines, Checkpoint every ~50 µs"},
	{"cpuwork-nocheckpoint", "Executor defaults without Checkpoint in the batch loop"},
	{"cpuwork-sparep", "Executor with SCHED_IDLE batch threads and one spare P and slot (GOMAXPROCS = Slots = budget+1, SpareP), no Checkpoint: the lanes mechanism alone"},
}

// priority: critical requests of ~crit CPU arrive open-loop every interval
// while batch work saturates every P.
func (r *Runner) priority(crit, unit time.Duration) *Scenario {
	interval := 7 * time.Millisecond
	s := &Scenario{
		Name:     "priority",
		Baseline: "goroutines",
		Claim: fmt.Sprintf("critical requests (~%v CPU, open-loop every %v) keep their latency while batch work saturates all %d Ps (C4: p99 47 -> 12.7 ms with locked OS threads)",
			crit.Round(10*time.Microsecond), interval, runtime.GOMAXPROCS(0)),
	}
	for _, pv := range priorityVariants {
		s.Variants = append(s.Variants, &Variant{Name: pv.name, Description: pv.desc, Valid: true})
	}
	critW := workload.NewSpin(crit)
	batchW := workload.NewSpin(unit)
	// Undisturbed batch throughput: batch alone for the same duration.
	r.step("priority: batch alone (reference)")
	alone := r.batchAlone(batchW)
	units := map[string]float64{}
	for round := 0; round < r.rounds; round++ {
		for _, v := range s.Variants {
			r.step(fmt.Sprintf("priority: %s (round %d/%d)", v.Name, round+1, r.rounds))
			res, err := r.priorityOnce(v.Name, critW, batchW, interval)
			if err != nil {
				v.Valid, v.Invalid = false, err.Error()
				continue
			}
			v.addRun(res.hist, res.series, res.u)
			v.OfferedPS += res.offered / float64(r.rounds)
			v.AchievedPS += res.achieved / float64(r.rounds)
			units[v.Name] += res.batchCPUps / float64(r.rounds)
			if res.priv != "" {
				v.Privileges = res.priv
			}
		}
	}
	for _, v := range s.Variants {
		v.Throughput = v.AchievedPS
		v.setExtra("batch_cpu_per_s", units[v.Name])
		v.setExtra("batch_alone_cpu_per_s", alone)
		if alone > 0 {
			v.setExtra("batch_share_of_alone", units[v.Name]/alone)
		}
		if v.Valid && v.OfferedPS > 0 && v.AchievedPS < 0.99*v.OfferedPS {
			v.Valid, v.Invalid = false, fmt.Sprintf("achieved %.1f/s of %.1f/s offered", v.AchievedPS, v.OfferedPS)
		}
	}
	s.ratios()
	s.Notes = append(s.Notes, "requests are generated in-process by a goroutine sleeping to each intended time; its timer lateness counts as latency (open-loop), and even an idle P wakes from a timer ~0.5 ms late here (see the timers scenario), which sets a floor under every variant's p50")
	g, cw := s.variant("goroutines"), s.variant("cpuwork")
	if g.Valid && cw.Valid {
		ratio := cw.Latency.P99 / g.Latency.P99
		share := cw.Extra["batch_share_of_alone"]
		holds := ratio <= 0.1 && share >= 0.85
		s.Holds = boolp(holds)
		s.Verdict = fmt.Sprintf("cpuwork critical p99 %.2f ms = %.3fx plain goroutines (%.2f ms; expected <= 0.1x) with batch at %.0f%% of its undisturbed throughput (expected >= 85%%): %s",
			cw.Latency.P99*1e3, ratio, g.Latency.P99*1e3, share*100, holdsWord(holds))
		if sp := s.variant("cpuwork-sparep"); sp != nil && sp.Valid {
			r2, sh2 := sp.Latency.P99/g.Latency.P99, sp.Extra["batch_share_of_alone"]
			ok := sp.Latency.P99 <= 0.001 && r2 <= 0.05 && sh2 >= 0.90
			s.Verdict += fmt.Sprintf("; demoted lanes + one spare P, no Checkpoint, no privileges: p99 %.2f ms = %.3fx (expected <= 1 ms and <= 0.05x) with batch at %.0f%% (expected >= 90%%): %s",
				sp.Latency.P99*1e3, r2, sh2*100, holdsWord(ok))
		}
	}
	return s
}

type onceResult struct {
	hist       *histT
	series     [][2]float64
	u          usage
	offered    float64
	achieved   float64
	batchCPUps float64
	priv       string
}

// batchAlone measures batch CPU-seconds per second with no critical load.
func (r *Runner) batchAlone(unit *workload.Spin) float64 {
	var stop atomic.Bool
	var done atomic.Int64
	var wg sync.WaitGroup
	t0 := time.Now()
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				unit.Run(0)
				done.Add(1)
			}
		}()
	}
	time.Sleep(r.duration)
	stop.Store(true)
	wg.Wait()
	return float64(done.Load()) * unit.D.Seconds() / time.Since(t0).Seconds()
}

func (r *Runner) priorityOnce(variant string, crit, unit *workload.Spin, interval time.Duration) (res onceResult, err error) {
	// Batch always runs one loop per CPU of the budget's slots or GOMAXPROCS,
	// whichever the variant allows; variants that change GOMAXPROCS restore
	// the runtime's default afterwards.
	P := runtime.GOMAXPROCS(0)
	switch variant {
	case "hybrid":
		runtime.GOMAXPROCS(max(1, runtime.NumCPU()/2))
		defer runtime.SetDefaultGOMAXPROCS()
	case "cpuwork-sparep":
		runtime.GOMAXPROCS(r.slots + 1)
		defer runtime.SetDefaultGOMAXPROCS()
	}
	var stop atomic.Bool
	var batchUnits atomic.Int64
	var bwg, cwg sync.WaitGroup
	var dispatch func(intended time.Time)
	var cleanup []func()
	m := startMeter()
	t0 := time.Now()
	expected := int(r.duration / interval)
	rec := newRecorder(t0, expected)
	var hmu sync.Mutex
	h := rec.shard()
	critical := func(intended time.Time) {
		crit.Run(0)
		now := time.Now()
		hmu.Lock()
		rec.record(h, now, now.Sub(intended))
		hmu.Unlock()
	}
	batchLoop := func(run func()) {
		for range P {
			bwg.Add(1)
			go func() {
				defer bwg.Done()
				for !stop.Load() {
					run()
					batchUnits.Add(1)
				}
			}()
		}
	}
	switch variant {
	case "goroutines":
		batchLoop(func() { unit.Run(0) })
		dispatch = func(t time.Time) { cwg.Add(1); go func() { defer cwg.Done(); critical(t) }() }
	case "two-pools", "os-thread-pool", "hybrid":
		batchLoop(func() { unit.Run(0) })
		ch := make(chan time.Time, 4096)
		threads := 1
		if variant == "hybrid" {
			threads = max(1, runtime.NumCPU()/2)
		}
		privc := make(chan string, threads)
		for range threads {
			cwg.Add(1)
			go func() {
				defer cwg.Done()
				if variant == "two-pools" {
					privc <- ""
				} else {
					// Never unlocked: the goroutine exits locked so the
					// runtime discards the thread and its priority with it.
					runtime.LockOSThread()
					privc <- raiseThread(variant == "os-thread-pool")
				}
				for t := range ch {
					critical(t)
				}
			}()
		}
		for range threads {
			res.priv = <-privc
		}
		dispatch = func(t time.Time) { ch <- t }
		cleanup = append(cleanup, func() { close(ch) })
	case "cpuwork", "cpuwork-nodemote", "cpuwork-nocheckpoint", "cpuwork-sparep":
		var q [cpuwork.NumClasses]int
		for i := range q {
			q[i] = 4096
		}
		slots := r.slots
		if variant == "cpuwork-sparep" {
			slots++ // one slot (and one P) more than batch may hold: Critical never waits for batch
		}
		e, cerr := cpuwork.New(cpuwork.Options{Slots: slots, QueueLimit: q, WatchInterval: -1, SpareP: variant == "cpuwork-sparep", Demotion: map[bool]cpuwork.Demotion{true: cpuwork.DemoteNever}[variant == "cpuwork-nodemote"]})
		if cerr != nil {
			return res, cerr
		}
		res.priv = "none: SCHED_IDLE batch threads need no privilege"
		ctx := context.Background()
		steps := int(unit.D / (50 * time.Microsecond))
		if variant != "cpuwork" && variant != "cpuwork-nodemote" {
			steps = 1
		}
		batchLoop(func() {
			e.Do(ctx, cpuwork.Batch, func(ctx context.Context) error {
				if steps == 1 {
					return unit.Run(0)
				}
				return unit.RunChecked(steps, func() error { return cpuwork.Checkpoint(ctx) })
			})
		})
		dispatch = func(t time.Time) {
			cwg.Add(1)
			go func() {
				defer cwg.Done()
				e.Do(ctx, cpuwork.Critical, func(context.Context) error { critical(t); return nil })
			}()
		}
		defer e.Close(context.Background())
	default:
		return res, fmt.Errorf("unknown priority variant %q", variant)
	}
	// Open-loop generator: request k is due at t0 + k*interval whatever
	// happened to earlier ones; latency counts from that intended time.
	sent := 0
	for k := 1; ; k++ {
		intended := t0.Add(time.Duration(k) * interval)
		if intended.Sub(t0) > r.duration {
			break
		}
		if d := time.Until(intended); d > 0 {
			time.Sleep(d)
		}
		dispatch(intended)
		sent++
	}
	stop.Store(true)
	for _, f := range cleanup {
		f()
	}
	cwg.Wait()
	bwg.Wait()
	wall := time.Since(t0)
	res.u = m.stop()
	res.hist, res.series = rec.merged(), rec.series
	res.offered = float64(sent) / r.duration.Seconds()
	res.achieved = float64(res.hist.TotalCount()) / r.duration.Seconds()
	res.batchCPUps = float64(batchUnits.Load()) * unit.D.Seconds() / wall.Seconds()
	return res, nil
}

// raiseThread gives the calling (locked) thread the published OS-thread
// pool's treatment: pinned to the last CPU (when pin) and SCHED_FIFO 50,
// else nice -10, as permitted. It returns what was applied.
func raiseThread(pin bool) string {
	var cpus []int
	if pin {
		cpus = []int{runtime.NumCPU() - 1}
	}
	fifo := osthread.Sched{Policy: osthread.FIFO, RTPriority: 50, CPUs: cpus}
	if err := fifo.ApplyCurrent(); err == nil {
		return fmt.Sprintf("SCHED_FIFO 50%s (needs CAP_SYS_NICE)", pinned(cpus))
	}
	nice := osthread.Sched{Policy: osthread.Other, Nice: -10, CPUs: cpus}
	if err := nice.ApplyCurrent(); err == nil {
		return fmt.Sprintf("nice -10%s (SCHED_FIFO refused; nice needs CAP_SYS_NICE)", pinned(cpus))
	} else {
		return "no priority change permitted: " + err.Error()
	}
}

func pinned(cpus []int) string {
	if cpus == nil {
		return ""
	}
	return fmt.Sprintf(", pinned to CPU %v", cpus)
}
