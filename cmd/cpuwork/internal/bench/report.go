// Package bench runs cpuwork bench's scenarios and writes the report.
//
// Measurement rules (docs/bench.md): latency runs from a task's arrival
// (its intended send time under open-loop load, the burst's start for a
// burst) to its completion, recorded in HDR histograms; every variant of a
// scenario runs in the same process, alternated over rounds so that noise
// hits all of them; results are reported as ratios against the scenario's
// baseline; a variant whose achieved rate falls below 99 % of the offered
// rate is marked invalid, not silently kept.
package bench

import (
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cpuwork/cpuwork/internal/cputime"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/cpuwork/cpuwork/budget"
	"golang.org/x/sys/unix"
)

// Report is the whole result, written to results.json. All times are in
// seconds.
type Report struct {
	Machine   Machine   `json:"machine"`
	Started   time.Time `json:"started"`
	DurationS float64   `json:"duration_s"`
	Quick     bool      `json:"quick"`
	Repeat    int       `json:"repeat"` // the minimum pairs of every scenario
	// PairsRule says how many pairs a scenario runs: the minimum, the
	// cap, and the looks at which it stops when every comparison is
	// decided.
	PairsRule string      `json:"pairs_rule"`
	Seed      int64       `json:"seed"` // seed of the per-repeat shuffles
	Scenarios []*Scenario `json:"scenarios"`
	Workloads []Workload  `json:"workloads"`
	Command   string      `json:"command"`
	// Swept lists cgroups left by benches that died, removed at the start.
	Swept      []string `json:"swept_cgroups,omitempty"`
	SchemaNote string   `json:"schema"`
	// Answers are the run's answers to the declared questions of the
	// scenarios it ran (none with --quick).
	Answers []Answer `json:"answers,omitempty"`
}

// Machine describes where the report was made.
type Machine struct {
	CPUs          int     `json:"cpus"`
	BudgetCores   float64 `json:"budget_cores"`
	BudgetSource  string  `json:"budget_source"`
	Slots         int     `json:"slots"`
	GOMAXPROCS    int     `json:"gomaxprocs"`
	Kernel        string  `json:"kernel"`
	GoVersion     string  `json:"go_version"`
	CgroupVersion int     `json:"cgroup_version"`
	Hostname      string  `json:"hostname"`
}

// Workload is a workload's measured time per item on one core.
type Workload struct {
	Name     string  `json:"name"`
	PerItemS float64 `json:"per_item_s"`
	Error    string  `json:"error,omitempty"`
}

// Scenario is one scenario's variants and verdict.
type Scenario struct {
	Name     string     `json:"name"`
	Claim    string     `json:"claim"`
	Baseline string     `json:"baseline"`
	Variants []*Variant `json:"variants"`
	// Verdict is the summary followed by every check in one sentence.
	Verdict string `json:"verdict"`
	// Status is the scenario's outcome in one word (verdict.go): worse,
	// better, equivalent or inconclusive (the worst decided verdict of its
	// comparisons, by case), not judged, skipped, or smoke test.
	Status Status `json:"status"`
	// Summary says in words what the scenario found per case ("better in
	// 3 of 3 cases", "worse at 95%").
	Summary string `json:"summary"`
	// Pairs is the number of paired rounds the scenario ran.
	Pairs  int           `json:"pairs"`
	Checks []CheckResult `json:"checks,omitempty"`
	// DurationS is the scenario's wall time, seconds.
	DurationS float64 `json:"duration_s"`
	// Calibration, when not empty, says why the scenario's load levels
	// are not what they say (a failed capacity measurement): nothing is
	// judged on them.
	Calibration string `json:"calibration_failed,omitempty"`
	// CapacityDrift, for a load scenario, is the spread of its rounds'
	// calibrated capacities as a share of their median: how far the
	// machine's speed moved while it ran (max - min) / median.
	CapacityDrift float64  `json:"capacity_drift,omitempty"`
	Skipped       string   `json:"skipped,omitempty"`
	Notes         []string `json:"notes,omitempty"`

	smoke bool // a --quick run: no verdicts
	// defaultRun: the default run (its inconclusive comparisons say how
	// many pairs would decide them here).
	defaultRun bool
	level      float64        // each look's interval level (lookLevel); 0: confidence
	decidedAt  map[string]int // check label -> pairs at which it was decided
}

// Repeat is one repeat of a variant: its own latency summary, throughput
// (latency samples per second of its wall time), CPU seconds, and the
// scenario's per-repeat figures (batch share, echo p99, ...).
type Repeat struct {
	Latency
	ThroughputPS float64            `json:"throughput_per_s"`
	CPUS         float64            `json:"cpu_s"`
	Extra        map[string]float64 `json:"extra,omitempty"`
	// NotJudged, when not empty, says why no check uses this repeat (its
	// load levels were not what they say: checkLoads); the checks judge
	// the other repeats.
	NotJudged string `json:"not_judged,omitempty"`
}

// Latency summarises a latency distribution in seconds.
type Latency struct {
	Count uint64  `json:"count"`
	Mean  float64 `json:"mean_s"`
	P50   float64 `json:"p50_s"`
	P90   float64 `json:"p90_s"`
	P99   float64 `json:"p99_s"`
	P999  float64 `json:"p999_s"`
	Max   float64 `json:"max_s"`
}

// Variant is one way of running the scenario's work.
type Variant struct {
	Name        string             `json:"name"`
	Description string             `json:"description"`
	Latency     Latency            `json:"latency"`
	Throughput  float64            `json:"throughput_per_s"`
	OfferedPS   float64            `json:"offered_per_s,omitempty"`
	AchievedPS  float64            `json:"achieved_per_s,omitempty"`
	CPU         float64            `json:"cpu_s"`
	WallS       float64            `json:"wall_s"`
	PeakGs      int                `json:"peak_goroutines"`
	PeakRSS     int64              `json:"peak_rss_bytes"`
	Valid       bool               `json:"valid"`
	Invalid     string             `json:"invalid_reason,omitempty"`
	Extra       map[string]float64 `json:"extra,omitempty"`
	Ratio       map[string]float64 `json:"ratio_to_baseline,omitempty"`
	Privileges  string             `json:"privileges,omitempty"`
	// Series holds (seconds since the variant's start, latency seconds)
	// points, at most a few thousand, for the latency-over-time plot (not
	// in results.json: the HDR histograms carry the distribution).
	Series [][2]float64 `json:"-"`
	// Repeats summarises each repeat (round) of the variant on its own;
	// Latency above is the pooled histogram of all of them.
	Repeats []Repeat `json:"repeats,omitempty"`

	hist  *hdrhistogram.Histogram
	kinds map[string]*hdrhistogram.Histogram // per request kind ("small", "large"), over the repeats
}

func newHist() *hdrhistogram.Histogram {
	// 1 µs .. 10 min at 3 significant digits.
	return hdrhistogram.New(1, int64(10*time.Minute/time.Microsecond), 3)
}

// recorder collects latencies from many goroutines: each takes its own
// histogram (hdrhistogram is not goroutine-safe) and they are merged.
type recorder struct {
	mu     sync.Mutex
	hists  []*hdrhistogram.Histogram
	series [][2]float64
	start  time.Time
	every  int
	n      int
}

func newRecorder(start time.Time, expected int) *recorder {
	return &recorder{start: start, every: max(expected/2000, 1)}
}

// shard returns a histogram for one goroutine's exclusive use.
func (r *recorder) shard() *hdrhistogram.Histogram {
	h := newHist()
	r.mu.Lock()
	r.hists = append(r.hists, h)
	r.mu.Unlock()
	return h
}

// record adds one latency observed at time t to h and, sampled, to the
// time series.
func (r *recorder) record(h *hdrhistogram.Histogram, t time.Time, lat time.Duration) {
	h.RecordValue(max(int64(lat/time.Microsecond), 1))
	r.mu.Lock()
	r.n++
	if r.n%r.every == 0 {
		r.series = append(r.series, [2]float64{t.Sub(r.start).Seconds(), lat.Seconds()})
	}
	r.mu.Unlock()
}

func (r *recorder) merged() *hdrhistogram.Histogram {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := newHist()
	for _, h := range r.hists {
		m.Merge(h)
	}
	return m
}

func latencyOf(h *hdrhistogram.Histogram) Latency {
	us := func(v float64) float64 { return v / 1e6 }
	return Latency{
		Count: uint64(h.TotalCount()),
		Mean:  us(h.Mean()),
		P50:   us(float64(h.ValueAtQuantile(50))),
		P90:   us(float64(h.ValueAtQuantile(90))),
		P99:   us(float64(h.ValueAtQuantile(99))),
		P999:  us(float64(h.ValueAtQuantile(99.9))),
		Max:   us(float64(h.Max())),
	}
}

// addRun merges one round's measurements into v.
func (v *Variant) addRun(h *hdrhistogram.Histogram, series [][2]float64, u usage) {
	if v.hist == nil {
		v.hist = newHist()
	}
	v.hist.Merge(h)
	v.Latency = latencyOf(v.hist)
	rp := Repeat{Latency: latencyOf(h), CPUS: u.cpu}
	if u.wall > 0 {
		rp.ThroughputPS = float64(h.TotalCount()) / u.wall
	}
	v.Repeats = append(v.Repeats, rp)
	if len(v.Series) < 4000 {
		v.Series = append(v.Series, series...)
	}
	v.CPU += u.cpu
	v.WallS += u.wall
	v.PeakGs = max(v.PeakGs, u.peakGs)
	v.PeakRSS = max(v.PeakRSS, u.peakRSS)
}

// setRepeatExtra records a per-repeat figure of the latest repeat.
func (v *Variant) setRepeatExtra(k string, x float64) {
	if len(v.Repeats) == 0 {
		return
	}
	rp := &v.Repeats[len(v.Repeats)-1]
	if rp.Extra == nil {
		rp.Extra = map[string]float64{}
	}
	rp.Extra[k] = x
}

// medianP99 is the median of the repeats' p99 (the pooled p99 when the
// variant has no repeats).
func (v *Variant) medianP99() float64 {
	if len(v.Repeats) == 0 {
		return v.Latency.P99
	}
	return median(v.p99s())
}

// p99s returns the p99 of each repeat in seconds.
func (v *Variant) p99s() []float64 {
	var out []float64
	for _, r := range v.Repeats {
		out = append(out, r.P99)
	}
	return out
}

// repeatExtras returns a per-repeat figure of each repeat.
func (v *Variant) repeatExtras(k string) []float64 {
	var out []float64
	for _, r := range v.Repeats {
		out = append(out, r.Extra[k])
	}
	return out
}

// median returns the median of xs (0 for none).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func (v *Variant) setExtra(k string, x float64) {
	if v.Extra == nil {
		v.Extra = map[string]float64{}
	}
	v.Extra[k] = x
}

// usage is what one round of a variant cost the process.
type usage struct {
	serviceS float64 // mean time a task's own work took, where a scenario measures it
	cpu      float64 // user+system CPU seconds (getrusage)
	wall     float64
	peakGs   int
	peakRSS  int64
}

// meter measures CPU time (getrusage RUSAGE_SELF), wall time, and samples
// goroutines and RSS every 10 ms until stop.
type meter struct {
	t0    time.Time
	cpu0  float64
	done  chan struct{}
	wg    sync.WaitGroup
	peakG int
	peakR int64
}

func startMeter() *meter {
	m := &meter{t0: time.Now(), cpu0: cpuSeconds(), done: make(chan struct{})}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			m.peakG = max(m.peakG, runtime.NumGoroutine())
			m.peakR = max(m.peakR, rssBytes())
			select {
			case <-m.done:
				return
			case <-t.C:
			}
		}
	}()
	return m
}

func (m *meter) stop() usage {
	close(m.done)
	m.wg.Wait()
	return usage{cpu: cpuSeconds() - m.cpu0, wall: time.Since(m.t0).Seconds(), peakGs: m.peakG, peakRSS: m.peakR}
}

func cpuSeconds() float64 {
	d, _ := cputime.Process()
	return d.Seconds()
}

func rssBytes() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	var pages int64
	for _, c := range f[1] {
		pages = pages*10 + int64(c-'0')
	}
	return pages * int64(os.Getpagesize())
}

func describeMachine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), GoVersion: runtime.Version()}
	if b, err := budget.Detect(); err == nil {
		m.BudgetCores, m.BudgetSource, m.Slots, m.CgroupVersion = b.Cores, string(b.Source), b.Slots(), b.CgroupVersion
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		m.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	m.Hostname, _ = os.Hostname()
	return m
}

// ratios fills each variant's ratio to the baseline variant: latency
// statistics and throughput.
func (s *Scenario) ratios() {
	var base *Variant
	for _, v := range s.Variants {
		if v.Name == s.Baseline {
			base = v
		}
	}
	if base == nil {
		return
	}
	for _, v := range s.Variants {
		v.Ratio = ratiosTo(v, base)
	}
}

// ratiosTo is v's latency (and throughput) as ratios to base's, the one
// definition every scenario uses: p99 is the median of the repeats' p99s,
// the other percentiles pool the repeats. A ratio to a zero is 0.
func ratiosTo(v, base *Variant) map[string]float64 {
	div := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return a / b
	}
	r := map[string]float64{
		"mean": div(v.Latency.Mean, base.Latency.Mean),
		"p50":  div(v.Latency.P50, base.Latency.P50),
		"p90":  div(v.Latency.P90, base.Latency.P90),
		"p99":  div(v.medianP99(), base.medianP99()),
		"p999": div(v.Latency.P999, base.Latency.P999),
	}
	if base.Throughput > 0 {
		r["throughput"] = div(v.Throughput, base.Throughput)
	}
	return r
}

func (s *Scenario) variant(name string) *Variant {
	for _, v := range s.Variants {
		if v.Name == name {
			return v
		}
	}
	return nil
}

type histT = hdrhistogram.Histogram
