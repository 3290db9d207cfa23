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
	"golang.org/x/sys/unix"
)

var priorityVariants = []struct{ name, desc string }{
	{"goroutines", "critical requests as plain goroutines beside GOMAXPROCS batch goroutines"},
	{"two-pools", "a 1-worker critical pool and a GOMAXPROCS-worker batch pool"},
	{"locked-thread", "critical requests served by a goroutine locked to an OS thread at nice -10 (C4)"},
	{"cpuwork", "Executor: critical as Do(Critical), batch as Do(Batch) with Checkpoint every ~50 µs"},
	{"cpuwork-nocheckpoint", "Executor classes without Checkpoint in the batch loop"},
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
	g, cw := s.variant("goroutines"), s.variant("cpuwork")
	if g.Valid && cw.Valid {
		ratio := cw.Latency.P99 / g.Latency.P99
		share := cw.Extra["batch_share_of_alone"]
		holds := ratio <= 0.1 && share >= 0.85
		s.Holds = boolp(holds)
		s.Verdict = fmt.Sprintf("cpuwork critical p99 %.2f ms = %.3fx plain goroutines (%.2f ms; expected <= 0.1x) with batch at %.0f%% of its undisturbed throughput (expected >= 85%%): %s",
			cw.Latency.P99*1e3, ratio, g.Latency.P99*1e3, share*100, holdsWord(holds))
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
	P := runtime.GOMAXPROCS(0)
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
	case "two-pools", "locked-thread":
		batchLoop(func() { unit.Run(0) })
		ch := make(chan time.Time, 4096)
		locked := variant == "locked-thread"
		privc := make(chan string, 1)
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			if locked {
				// Never unlocked: the goroutine exits locked so the runtime
				// discards the thread and its priority with it.
				runtime.LockOSThread()
				if err := unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), -10); err != nil {
					privc <- "nice -10 denied (" + err.Error() + "): ran at nice 0"
				} else {
					privc <- "nice -10 on the critical thread (needs CAP_SYS_NICE)"
				}
			} else {
				privc <- ""
			}
			for t := range ch {
				critical(t)
			}
		}()
		res.priv = <-privc
		dispatch = func(t time.Time) { ch <- t }
		cleanup = append(cleanup, func() { close(ch) })
	case "cpuwork", "cpuwork-nocheckpoint":
		e, cerr := r.executor(4096)
		if cerr != nil {
			return res, cerr
		}
		ctx := context.Background()
		steps := int(unit.D / (50 * time.Microsecond))
		if variant == "cpuwork-nocheckpoint" {
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
	res.offered = float64(expected) / r.duration.Seconds()
	res.achieved = float64(res.hist.TotalCount()) / r.duration.Seconds()
	res.batchCPUps = float64(batchUnits.Load()) * unit.D.Seconds() / wall.Seconds()
	_ = sent
	return res, nil
}
