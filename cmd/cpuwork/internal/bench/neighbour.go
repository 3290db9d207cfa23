package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cpuwork/cpuwork/cgroup"
	"github.com/cpuwork/cpuwork/cmd/cpuwork/internal/workload"
)

// ProbeChild is the hidden `cpuwork probe` process: every interval, open
// loop, it does iters spin iterations and records the time from the
// intended start to the end of that work; it writes the latencies in
// nanoseconds as one JSON array to w.
func ProbeChild(w io.Writer, interval, d time.Duration, iters int) error {
	if interval <= 0 || d <= 0 || iters < 1 {
		return errors.New("probe: interval, duration and iters must be positive")
	}
	spin := &workload.Spin{Iters: iters}
	t0 := time.Now()
	var out []int64
	for k := 1; ; k++ {
		due := t0.Add(time.Duration(k) * interval)
		if due.Sub(t0) > d {
			break
		}
		time.Sleep(time.Until(due))
		spin.Run(0)
		out = append(out, int64(time.Since(due)))
	}
	return json.NewEncoder(w).Encode(out)
}

// HogChild is the hidden `cpuwork hog` process: threads goroutines that
// spin until d has passed.
func HogChild(threads int, d time.Duration) error {
	if threads < 1 || d <= 0 {
		return errors.New("hog: threads and duration must be positive")
	}
	runtime.GOMAXPROCS(threads)
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := &workload.Spin{Iters: 100_000}
			for !stop.Load() {
				s.Run(0)
			}
		}()
	}
	time.Sleep(d)
	stop.Store(true)
	wg.Wait()
	return nil
}

var neighbourVariants = []struct{ name, desc string }{
	{"no-hog", "the probe alone (reference)"},
	{"same-cgroup", "probe and a 2-thread CPU hog in one cgroup"},
	{"equal-weights", "probe and hog in sibling cgroups with equal weights (100)"},
	{"weight-2:1", "probe's cgroup at weight 200, hog's at 100: what `cpuwork run --weight 200` sets up (C2's higher cpu.shares)"},
	{"hog-idle", "hog's cgroup with cpu.idle (`cpuwork run --idle`)"},
}

func (r *Runner) neighbour(self string) *Scenario {
	s := &Scenario{
		Name:     "neighbour",
		Baseline: "equal-weights",
		Claim:    "a dedicated cgroup with a higher weight protects a service from a CPU hog on the same machine (C2: latency 180 -> 35 ms)",
	}
	if os.Geteuid() != 0 {
		s.Skipped = "needs root to create cgroups"
		return s
	}
	d := min(r.duration, 2*time.Second)
	probes := []struct {
		name string
		work time.Duration
	}{{"light", time.Millisecond}, {"heavy", 4 * time.Millisecond}}
	for _, p := range probes {
		for _, nv := range neighbourVariants {
			s.Variants = append(s.Variants, &Variant{Name: nv.name + "@" + p.name, Description: nv.desc + fmt.Sprintf("; probe %v of CPU every 10 ms", p.work), Valid: true})
		}
	}
	for round := 0; round < r.rounds; round++ {
		for _, p := range probes {
			spin := workload.NewSpin(p.work)
			for _, nv := range neighbourVariants {
				v := s.variant(nv.name + "@" + p.name)
				r.step(fmt.Sprintf("neighbour: %s (repeat %d/%d)", v.Name, round+1, r.rounds))
				if err := r.neighbourOnce(v, nv.name, spin.Iters, d, self); err != nil {
					v.Valid, v.Invalid = false, err.Error()
					if errors.Is(err, cgroup.ErrPermission) || errors.Is(err, cgroup.ErrUnsupported) {
						s.Skipped = err.Error()
						return s
					}
				}
			}
		}
	}
	for _, p := range probes {
		base := s.variant("equal-weights@" + p.name)
		for _, nv := range neighbourVariants {
			v := s.variant(nv.name + "@" + p.name)
			if base.Latency.P90 > 0 {
				v.Ratio = ratiosTo(v, base)
			}
		}
	}
	e, w := s.variant("equal-weights@heavy"), s.variant("weight-2:1@heavy")
	if e.Valid && w.Valid {
		p90s := func(v *Variant) []float64 {
			var out []float64
			for _, r := range v.Repeats {
				out = append(out, r.P90)
			}
			return out
		}
		ratio := median(p90s(w)) / median(p90s(e))
		holds := ratio <= 0.7
		n := min(len(w.Repeats), len(e.Repeats))
		k := agreement(n, func(i int) bool { return w.Repeats[i].P90/e.Repeats[i].P90 <= 0.7 })
		s.Holds = boolp(holds)
		s.Verdict = fmt.Sprintf("heavy probe p90 with 2:1 weights %s = %.2fx equal weights (%s; expected <= 0.7x; medians of the repeats); light probe p99 %s vs %s; hog at cpu.idle: heavy p90 %s: %s in %d/%d repeats",
			ms(median(p90s(w))), ratio, ms(median(p90s(e))), ms(s.variant("weight-2:1@light").medianP99()), ms(s.variant("equal-weights@light").medianP99()),
			ms(median(p90s(s.variant("hog-idle@heavy")))), holdsWord(holds), k, n)
	}
	return s
}

func (r *Runner) neighbourOnce(v *Variant, variant string, iters int, d time.Duration, self string) error {
	pid := os.Getpid()
	probeCfg := cgroup.Config{Name: fmt.Sprintf("bench-probe-%d", pid)}
	hogCfg := cgroup.Config{Name: fmt.Sprintf("bench-hog-%d", pid)}
	switch variant {
	case "weight-2:1":
		probeCfg.Weight, hogCfg.Weight = 200, 100
	case "equal-weights", "same-cgroup", "no-hog":
		probeCfg.Weight, hogCfg.Weight = 100, 100
	case "hog-idle":
		hogCfg.Idle = true
	}
	pg, err := cgroup.New(probeCfg)
	if err != nil {
		return err
	}
	defer pg.Remove()
	hg := pg
	if variant != "same-cgroup" {
		if hg, err = cgroup.New(hogCfg); err != nil {
			return err
		}
		defer hg.Remove()
	}
	var hog *exec.Cmd
	if variant != "no-hog" {
		var done func()
		hog, done, err = inGroup(self, hg, "hog", "--threads", strconv.Itoa(runtime.NumCPU()), "--duration", (d + 2*time.Second).String())
		if err != nil {
			return fmt.Errorf("neighbour: hog: %w", err)
		}
		err = hog.Start()
		done()
		if err != nil {
			return fmt.Errorf("neighbour: start hog: %w", err)
		}
		defer func() { hog.Process.Kill(); hog.Wait() }()
		time.Sleep(200 * time.Millisecond) // let the hog saturate the CPUs
	}
	m := startMeter()
	t0 := time.Now()
	probe, done, err := inGroup(self, pg, "probe", "--interval", "10ms", "--duration", d.String(), "--iters", strconv.Itoa(iters))
	if err != nil {
		return fmt.Errorf("neighbour: probe: %w", err)
	}
	out, err := probe.Output()
	done()
	u := m.stop()
	if err != nil {
		return fmt.Errorf("neighbour: probe: %w", err)
	}
	var ns []int64
	if err := json.Unmarshal(out, &ns); err != nil || len(ns) == 0 {
		return fmt.Errorf("neighbour: probe output %q: %v", out, err)
	}
	rec := newRecorder(t0, len(ns))
	h := rec.shard()
	for k, x := range ns {
		rec.record(h, t0.Add(time.Duration(k+1)*10*time.Millisecond), time.Duration(x))
	}
	if st, err := pg.Stat(); err == nil {
		u.cpu = st.Usage.Seconds()
	}
	v.addRun(rec.merged(), rec.series, u)
	v.OfferedPS += 100 / float64(r.rounds)
	v.AchievedPS += float64(len(ns)) / d.Seconds() / float64(r.rounds)
	v.Throughput = v.AchievedPS
	return nil
}
