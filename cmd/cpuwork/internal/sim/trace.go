package sim

import (
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/cpuwork/cpuwork/internal/admission"
	"github.com/cpuwork/cpuwork/internal/trace"
)

// ReadCSV reads open-loop requests from a trace (the format of package
// internal/trace: a header naming its columns, then one request per line;
// arrival_ms, class and cpu_ms required). The requests come back sorted
// by arrival; a request that never ran where it was recorded (no cpu_ms)
// is sized at the median CPU time of its class's requests that ran. An
// error names the line and the column. The input is bounded as the trace
// package's Read says (MaxTraceBytes, MaxLineBytes, ...).
func ReadCSV(r io.Reader) ([]Request, error) {
	t, err := ReadTrace(r)
	return t.Requests, err
}

// Trace is a trace ReadTrace read.
type Trace struct {
	Requests []Request // sorted by arrival
	// Unsorted is the line of the first request that arrives before the
	// one on the line above it (0: the trace was in order), so that a
	// caller can say it replayed the trace sorted.
	Unsorted int
	// Sized counts the requests that never ran where they were recorded,
	// sized at their class's median.
	Sized int
	// Targets is each class's most frequent latency target in the trace
	// (target_ms; 0: none recorded): the objective it was recorded under.
	Targets [admission.NumClasses]time.Duration
	// Recorded counts the requests by how they ended where they were
	// recorded (outcome; Unknown for a trace without it).
	Recorded [5]int
	// Estimated counts the requests whose recorded CPU time is an
	// estimate (cpu_estimated).
	Estimated int
}

// ReadTrace is ReadCSV with what else the trace says (Trace).
func ReadTrace(r io.Reader) (Trace, error) {
	var t Trace
	recs, unsorted, err := trace.Read(r)
	if err != nil {
		return t, err
	}
	sized, err := trace.SizeUnknown(recs)
	if err != nil {
		return t, err
	}
	t.Unsorted, t.Sized = unsorted, sized
	t.Requests = make([]Request, len(recs))
	var counts [admission.NumClasses]map[time.Duration]int
	for i, q := range recs {
		t.Requests[i] = Request{At: q.Arrival, Class: q.Class, CPU: q.CPU, Deadline: q.Deadline, Kind: q.Kind, Key: q.Key}
		if q.Estimated {
			t.Estimated++
		}
		if int(q.Outcome) < len(t.Recorded) {
			t.Recorded[q.Outcome]++
		}
		if q.Target > 0 {
			if counts[q.Class] == nil {
				counts[q.Class] = map[time.Duration]int{}
			}
			counts[q.Class][q.Target]++
		}
	}
	for c, m := range counts {
		best := 0
		for d, n := range m {
			if n > best || n == best && d < t.Targets[c] {
				t.Targets[c], best = d, n
			}
		}
	}
	return t, nil
}

// The bounds of a trace (ReadCSV): the trace package's.
const (
	MaxTraceBytes = trace.MaxTraceBytes
	MaxLineBytes  = trace.MaxLineBytes
	MaxKindBytes  = trace.MaxKindBytes
	MaxKinds      = trace.MaxKinds
	MaxCPU        = trace.MaxCPU
	MaxSpan       = trace.MaxSpan
)

// quote quotes s for an error, cut to its first 32 bytes.
func quote(s string) string { return trace.Quote(s) }

// maxArrivals bounds the requests a scenario generates.
const maxArrivals = 2_000_000

// ParseClass reads a class name.
func ParseClass(s string) (Class, error) { return trace.ParseClass(s) }

// ScenarioInfo describes a scenario Scenario builds.
type ScenarioInfo struct {
	Name, What string
	// Loads are its default levels, multiples of capacity (nil: its load
	// is fixed; Scenario ignores the level).
	Loads []float64
	// Named: replayed only when named, not by default.
	Named bool
}

// Scenarios are the bench scenarios whose admission policy a simulation
// can replay, with the sizes their runs measured on a 2-core machine;
// all but step are the default run's (step is realserver-step's).
var Scenarios = []ScenarioInfo{
	{"service", "an HTTP service: 90 % small requests (77 µs) and 10 % large (34.33 ms), Poisson arrivals, objective 3x a large one, on 2 slots", []float64{0.8, 2}, false},
	{"inference", "ONNX Runtime: 90 % one image (5.89 ms) and 10 % four (one task of 23.56 ms here), Poisson arrivals, objective 3x a large one, on 2 slots", []float64{0.8, 2}, false},
	{"priority", "critical requests of 200 µs every 7 ms (each within 1 ms after its time) beside batch tasks of 1 ms from 2 clients that never stop, calling Checkpoint every 50 µs under cpuwork, on 2 slots", nil, false},
	{"burst", "500 tasks of 1.5 ms arriving at once, on 2 slots", nil, false},
	{"burst-long", "50 tasks of 40 ms arriving at once, on 2 slots", nil, false},
	{"step", "imageproxy's mix (90 % thumbnails of 17.05 ms, 10 % smart crops of 258.52 ms), objective 3x a crop, clients giving up after twice it, Poisson arrivals at 80 % for 5 s, then at the load for 5 s; pool-503 is imgproxy's admitter (a queue of 4); with the served latency's recovery after the step", []float64{1.4, 3}, true},
}

// Scenario builds a scenario's workload at load, a multiple of its
// capacity (the slots over the mean CPU time per request; step's level
// after its step at d/2; ignored by priority and the bursts), for d (0:
// 10 s), arrivals drawn from seed.
func Scenario(name string, load float64, d time.Duration, seed uint64) (*Workload, error) {
	if d <= 0 {
		d = 10 * time.Second
	}
	const slots = 2
	rng := rand.New(rand.NewPCG(seed, 0x73696d)) // "sim"
	tooMany := false
	checked := func(w *Workload) (*Workload, error) {
		if tooMany {
			return nil, fmt.Errorf("%s at %v of capacity for %v: over %d arrivals; lower the load or the duration", name, load, d, maxArrivals)
		}
		return w, nil
	}
	// mix is Poisson arrivals of 90 % small and 10 % large requests at
	// load, after a step from 80 % at stepAt (0: none), clients giving
	// up after deadline (0: never).
	mix := func(small, large, objective, stepAt, deadline time.Duration) *Workload {
		w := &Workload{Name: fmt.Sprintf("%s at %.0f%%", name, load*100), Slots: slots, Duration: d, Targets: true, Declared: true, StepAt: stepAt}
		if stepAt > 0 {
			w.Name = fmt.Sprintf("%s from 80%% to %.0f%% at %v", name, load*100, stepAt)
		}
		w.Objective[admission.Interactive] = objective
		mean := 0.9*small.Seconds() + 0.1*large.Seconds()
		for t := time.Duration(0); ; {
			l := load
			if t < stepAt {
				l = 0.8
			}
			t += time.Duration(rng.ExpFloat64() / (l * slots / mean) * 1e9)
			if t >= d {
				break
			}
			if len(w.Requests) == maxArrivals {
				tooMany = true
				break
			}
			q := Request{At: t, Class: admission.Interactive, CPU: small, Kind: "small", Deadline: deadline}
			if rng.Float64() >= 0.9 {
				q.CPU, q.Kind = large, "large"
			}
			w.Requests = append(w.Requests, q)
		}
		return w
	}
	switch name {
	case "service":
		large := 34330 * time.Microsecond
		return checked(mix(77*time.Microsecond, large, 3*large, 0, 0))
	case "inference":
		large := 4 * 5890 * time.Microsecond
		return checked(mix(5890*time.Microsecond, large, 3*large, 0, 0))
	case "step":
		// imageproxy's middleware gives no run time (Declared false).
		large := 258520 * time.Microsecond
		w := mix(17050*time.Microsecond, large, 3*large, d/2, 6*large)
		w.Declared = false
		w.QueueLimit = 2 * slots // imgproxy's admitter: a queue of 2x GOMAXPROCS
		return checked(w)
	case "priority":
		if d > time.Hour {
			return nil, fmt.Errorf("priority for %v: at most an hour", d)
		}
		w := &Workload{Name: name, Slots: slots, Duration: d}
		for t := time.Duration(0); t < d; t += 7 * time.Millisecond {
			// Each sent within 1 ms after its time: the batch tasks'
			// phase is not locked to the arrivals'.
			at := t + time.Duration(rng.Int64N(int64(time.Millisecond)))
			w.Requests = append(w.Requests, Request{At: at, Class: admission.Critical, CPU: 200 * time.Microsecond, Kind: "critical"})
		}
		w.Loops = []Loop{{Class: admission.Batch, CPU: time.Millisecond, Clients: slots, Kind: "batch", Checkpoint: 50 * time.Microsecond}}
		return w, nil
	case "burst", "burst-long":
		n, c := 500, 1500*time.Microsecond
		if name == "burst-long" {
			n, c = 50, 40*time.Millisecond
		}
		w := &Workload{Name: name, Slots: slots, Duration: time.Duration(n) * c}
		for range n {
			w.Requests = append(w.Requests, Request{Class: admission.Interactive, CPU: c, Kind: "task"})
		}
		return w, nil
	}
	var known []string
	for _, s := range Scenarios {
		known = append(known, s.Name)
	}
	return nil, fmt.Errorf("no scenario %q to simulate (known: %s)", name, strings.Join(known, ", "))
}
