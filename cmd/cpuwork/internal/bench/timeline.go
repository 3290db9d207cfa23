package bench

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cpuwork/cpuwork/budget"
	"github.com/cpuwork/cpuwork/cgroup"
	"github.com/cpuwork/cpuwork/cmd/cpuwork/internal/workload"
	"github.com/cpuwork/cpuwork/schedstat"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// TimelinePolicies are the ways QuotaTimeline runs the quota scenario's
// rounds under a quota: floor(quota) slots, ceil(quota) unpaced (Go's
// default GOMAXPROCS with plain goroutines: what "ceil" does without
// pacing), and cpuwork's default, the fractional slot.
var TimelinePolicies = []struct{ Name, Mode, Env string }{
	{"floor (cpuwork QuotaFloor)", "cpuwork-floor", ""},
	{"ceil (Go's default GOMAXPROCS, goroutines)", "goroutines", ""},
	{"fractional slot (cpuwork default)", "cpuwork", ""},
}

// TimelineSample is one 100 ms window of a policy's run.
type TimelineSample struct {
	AtS        float64 // seconds since the policy's start
	QuotaUsed  float64 // CPU used in the window / (quota x window)
	Throttled  uint64  // throttled periods since the start
	PeriodsRan uint64
}

// QuotaTimeline runs the quota scenario's rounds (10 tasks x 2 ms) for d
// under a quota of q cores with each policy in turn, in a cgroup of its
// own, sampling the cgroup's cpu.stat every 100 ms, and writes a PNG plot
// of the quota used per window and the throttled periods over time to
// out, and the samples as text to log. Needs root (a quota cgroup).
func QuotaTimeline(self, out string, log io.Writer, q float64, d time.Duration) error {
	spin := workload.NewSpin(2 * time.Millisecond)
	rounds := int(d/(20*time.Millisecond)) * 4 // more than d needs at any policy: the child is stopped at d
	series := map[string][]TimelineSample{}
	for _, pol := range TimelinePolicies {
		g, err := newGroup("bench-quota", cgroup.Config{CPUs: q})
		if err != nil {
			return err
		}
		samples, err := timelineOnce(self, g, pol.Mode, rounds, spin.Iters, q, d)
		removeGroup(g)
		if err != nil {
			return fmt.Errorf("%s: %w", pol.Name, err)
		}
		series[pol.Name] = samples
		for _, s := range samples {
			fmt.Fprintf(log, "%s\t%.1f\t%.3f\t%d\t%d\n", pol.Mode, s.AtS, s.QuotaUsed, s.Throttled, s.PeriodsRan)
		}
	}
	used := plot.New()
	used.Title.Text = fmt.Sprintf("quota used per 100 ms, %.2f-CPU cgroup", q)
	used.X.Label.Text = "seconds"
	used.Y.Label.Text = "CPU used / quota"
	thr := plot.New()
	thr.Title.Text = "throttled CFS periods (cumulative)"
	thr.X.Label.Text = "seconds"
	thr.Y.Label.Text = "periods"
	var a, b []any
	for _, pol := range TimelinePolicies {
		var pu, pt plotter.XYs
		for _, s := range series[pol.Name] {
			pu = append(pu, plotter.XY{X: s.AtS, Y: s.QuotaUsed})
			pt = append(pt, plotter.XY{X: s.AtS, Y: float64(s.Throttled)})
		}
		a, b = append(a, pol.Name, pu), append(b, pol.Name, pt)
	}
	if err := plotutil.AddLines(used, a...); err != nil {
		return err
	}
	if err := plotutil.AddLines(thr, b...); err != nil {
		return err
	}
	used.Legend.Top, thr.Legend.Top, thr.Legend.Left = true, true, true
	img := vgimg.New(9*vg.Inch, 7*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(4), PadY: vg.Points(8)}
	canvases := plot.Align([][]*plot.Plot{{used}, {thr}}, tiles, dc)
	used.Draw(canvases[0][0])
	thr.Draw(canvases[1][0])
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = vgimg.PngCanvas{Canvas: img}.WriteTo(f)
	return err
}

func timelineOnce(self string, g *cgroup.Group, mode string, rounds, iters int, q float64, d time.Duration) ([]TimelineSample, error) {
	defer pinForChildren()()
	cmd, done, err := inGroup(self, g, "quota-child", "--mode", mode, "--rounds", strconv.Itoa(rounds),
		"--goroutines", "10", "--iters", strconv.Itoa(iters))
	if err != nil {
		return nil, err
	}
	cmd.Stdout = io.Discard
	err = cmd.Start()
	done()
	if err != nil {
		return nil, err
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	first, err := g.Stat()
	if err != nil {
		return nil, err
	}
	// v2's cpu.stat has usage_usec; on v1 the group's cpuacct.usage (ns),
	// where cpuacct is mounted with cpu, else the child's threads.
	usage := func(st budget.Stat) time.Duration {
		if st.Usage > 0 {
			return st.Usage
		}
		if b, err := os.ReadFile(filepath.Join(g.Dir(), "cpuacct.usage")); err == nil {
			ns, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			return time.Duration(ns)
		}
		// cpuacct mounted apart: the child is the group's one process;
		// its threads' on-CPU time (schedstat, ns).
		if t, err := schedstat.ReadThreads(cmd.Process.Pid); err == nil {
			return t.OnCPU
		}
		return 0
	}
	first.Usage = usage(first)
	prev, t0 := first, time.Now()
	var out []TimelineSample
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for range tick.C {
		st, err := g.Stat()
		if err != nil {
			return nil, err
		}
		st.Usage = usage(st)
		now := time.Since(t0)
		win := 100 * time.Millisecond
		out = append(out, TimelineSample{AtS: now.Seconds(), QuotaUsed: float64(st.Usage-prev.Usage) / (q * float64(win)),
			Throttled: st.ThrottledPeriods - first.ThrottledPeriods, PeriodsRan: st.Periods - first.Periods})
		prev = st
		if now >= d {
			break
		}
	}
	if len(out) > 0 && prev.Usage == first.Usage {
		return nil, fmt.Errorf("the cgroup's usage counter did not move (cgroup v1 without cpuacct in the cpu hierarchy?)")
	}
	return out, nil
}
