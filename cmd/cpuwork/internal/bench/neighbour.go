package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
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
	nvs := slices.DeleteFunc(slices.Clone(neighbourVariants), func(nv struct{ name, desc string }) bool { return !r.runs(nv.name) })
	nvs = append(nvs, struct{ name, desc string }{neighbourAA + aaSuffix, aaDesc(neighbourAA)})
	for _, p := range probes {
		for _, nv := range nvs {
			s.Variants = append(s.Variants, &Variant{Name: nv.name + "@" + p.name, Description: nv.desc + fmt.Sprintf("; probe %v of CPU every 10 ms", p.work), Valid: true})
		}
	}
	r.pairs(s, func() []check { return neighbourChecks() }, func(round int) {
		for _, p := range shuffledOf(r, probes) {
			spin := workload.NewSpin(p.work)
			for _, nv := range shuffledOf(r, nvs) {
				v := s.variant(nv.name + "@" + p.name)
				r.step(fmt.Sprintf("neighbour: %s (pair %d)", v.Name, round+1))
				if err := r.neighbourOnce(v, strings.TrimSuffix(nv.name, aaSuffix), spin.Iters, d, self); err != nil {
					v.Valid, v.Invalid = false, err.Error()
					if errors.Is(err, cgroup.ErrPermission) || errors.Is(err, cgroup.ErrUnsupported) {
						s.Skipped = err.Error()
						return
					}
				}
			}
		}
	})
	if s.Skipped != "" {
		return s
	}
	for _, p := range probes {
		base := s.variant("equal-weights@" + p.name)
		for _, nv := range nvs {
			v := s.variant(nv.name + "@" + p.name)
			if base.Latency.P90 > 0 {
				v.Ratio = ratiosTo(v, base)
			}
		}
	}
	judgeChecks(s, neighbourChecks())
	return s
}

// neighbourChecks: what `cpuwork run --weight 200` sets up (the probe's
// cgroup at twice the hog's weight) against equal weights, on the heavy
// probe's p90 (C2's claim: a higher weight protects the service), with the
// light probe's p99 as a second check and the heavy probe's mean (its
// median is the probe's own run time whatever the weights; the mean
// carries the tail's weight).
func neighbourChecks() []check {
	aa := func(p string) [2]string { return [2]string{neighbourAA + "@" + p, neighbourAA + aaSuffix + "@" + p} }
	return []check{
		{label: "heavy probe: mean", judged: "weight-2:1@heavy", against: []string{"equal-weights@heavy"}, metric: "mean", aa: aa("heavy")},
		{label: "heavy probe: p90", judged: "weight-2:1@heavy", against: []string{"equal-weights@heavy"}, metric: "p90", limit: 0.7, aa: aa("heavy")},
		{label: "light probe: p99", judged: "weight-2:1@light", against: []string{"equal-weights@light"}, metric: "p99", aa: aa("light")},
	}
}

// neighbourAA is the neighbour scenario's A/A control: equal weights, what
// two cgroups get when nobody sets one.
const neighbourAA = "equal-weights"

func (r *Runner) neighbourOnce(v *Variant, variant string, iters int, d time.Duration, self string) error {
	var probeCfg, hogCfg cgroup.Config
	switch variant {
	case "weight-2:1":
		probeCfg.Weight, hogCfg.Weight = 200, 100
	case "equal-weights", "same-cgroup", "no-hog":
		probeCfg.Weight, hogCfg.Weight = 100, 100
	case "hog-idle":
		hogCfg.Idle = true
	}
	pg, err := newGroup("bench-probe", probeCfg)
	if err != nil {
		return err
	}
	defer removeGroup(pg)
	hg := pg
	if variant != "same-cgroup" {
		if hg, err = newGroup("bench-hog", hogCfg); err != nil {
			return err
		}
		defer removeGroup(hg)
	}
	defer pinForChildren()() // the hog and the probe are reaped before this returns
	var hog *exec.Cmd
	var hogExited chan struct{} // closed when the hog has exited
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
		hogExited = make(chan struct{})
		go func() { hog.Wait(); close(hogExited) }()
		defer func() { hog.Process.Kill(); <-hogExited }()
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
	if err := probeValid(len(ns), d); err != nil {
		return err
	}
	if hogExited != nil && isClosed(hogExited) {
		return fmt.Errorf("neighbour: the hog exited before the probe finished: %v", hog.ProcessState)
	}
	rec := newRecorder(t0, len(ns))
	h := rec.shard()
	for k, x := range ns {
		rec.record(h, t0.Add(time.Duration(k+1)*10*time.Millisecond), time.Duration(x))
	}
	// The probe's CPU: its cgroup's usage (v2, or v1 with cpuacct
	// co-mounted with cpu), else its own rusage (v1 with cpuacct mounted
	// apart: the group does not join that hierarchy; the probe is one
	// process, so its rusage is the same figure).
	u.cpu = 0
	if st, err := pg.Stat(); err == nil {
		u.cpu = st.Usage.Seconds()
	}
	if u.cpu == 0 && probe.ProcessState != nil {
		u.cpu = (probe.ProcessState.UserTime() + probe.ProcessState.SystemTime()).Seconds()
	}
	if err := cpuValid(u.cpu, "neighbour probe"); err != nil {
		return err
	}
	v.addRun(rec.merged(), rec.series, u)
	v.OfferedPS = 100
	v.AchievedPS = runMean(v.AchievedPS, float64(len(ns))/d.Seconds(), len(v.Repeats))
	v.Throughput = v.AchievedPS
	return nil
}

// isClosed reports whether ch is closed, without blocking.
func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
