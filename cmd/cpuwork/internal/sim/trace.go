package sim

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cpuwork/cpuwork/internal/admission"
)

// ReadCSV reads open-loop requests from a CSV trace: a header naming its
// columns, then one request per line. Columns (any order; the first
// three required):
//
//	arrival_ms   arrival from the trace's start, ms (decimals allowed)
//	class        critical, interactive, batch or background
//	cpu_ms       CPU time the request takes once running, ms (> 0)
//	deadline_ms  the client gives up this long after arrival, ms (empty or 0: never)
//	kind         a label the report groups by (empty: the class's name)
//
// The requests come back sorted by arrival. An error names the line and
// the column. The input is bounded: at most MaxTraceBytes in all, lines
// of at most MaxLineBytes, kinds of at most MaxKindBytes and at most
// MaxKinds of them, a CPU time of at most MaxCPU, arrivals and deadlines
// of at most MaxSpan, and CPU times that add up to at most MaxSpan. A
// UTF-8 byte order mark before the header is skipped.
func ReadCSV(r io.Reader) ([]Request, error) {
	reqs, _, err := ReadTrace(r)
	return reqs, err
}

// ReadTrace is ReadCSV that also reports the line of the first request
// that arrives before the one on the line above it (0: the trace was in
// order), so that a caller can say it replayed the trace sorted.
func ReadTrace(r io.Reader) ([]Request, int, error) {
	lr := &lineBound{r: r}
	cr := csv.NewReader(lr)
	cr.FieldsPerRecord = -1
	cr.TrimLeadingSpace = true
	cr.Comment = '#'
	col, err := readTraceHeader(cr, lr)
	if err != nil {
		return nil, 0, err
	}
	var reqs []Request
	unsorted := 0
	kinds := map[string]bool{}
	var total time.Duration
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, 0, lr.wrap(err)
		}
		line, _ := cr.FieldPos(0)
		q, err := traceRow{rec: rec, col: col, line: line}.request()
		if err != nil {
			return nil, 0, err
		}
		if total += q.CPU; total > MaxSpan {
			return nil, 0, fmt.Errorf("line %d: the CPU times so far add up to more than %v", line, MaxSpan)
		}
		if !kinds[q.Kind] {
			if len(kinds) == MaxKinds {
				return nil, 0, fmt.Errorf("line %d: kind %s: more than %d kinds (the report has a row per kind)", line, quote(q.Kind), MaxKinds)
			}
			kinds[strings.Clone(q.Kind)] = true
		}
		if n := len(reqs); unsorted == 0 && n > 0 && q.At < reqs[n-1].At {
			unsorted = line
		}
		reqs = append(reqs, q)
	}
	if len(reqs) == 0 {
		return nil, 0, errors.New("the trace has a header and no request")
	}
	slices.SortStableFunc(reqs, func(a, b Request) int { return int(a.At - b.At) })
	return reqs, unsorted, nil
}

// readTraceHeader reads a trace's header: each known column's index.
func readTraceHeader(cr *csv.Reader, lr *lineBound) (map[string]int, error) {
	head, err := cr.Read()
	if err == io.EOF {
		return nil, errors.New("the trace is empty: want a header (arrival_ms,class,cpu_ms[,deadline_ms][,kind]) and one line per request")
	}
	if err != nil {
		return nil, lr.wrap(err)
	}
	col := map[string]int{}
	for i, h := range head {
		if i == 0 {
			h = strings.TrimPrefix(h, "\ufeff") // what spreadsheets write first
		}
		h = strings.ToLower(strings.TrimSpace(h))
		switch h {
		case "arrival_ms", "class", "cpu_ms", "deadline_ms", "kind":
			if _, dup := col[h]; dup {
				return nil, fmt.Errorf("line 1: column %q twice", h)
			}
			col[h] = i
		default:
			return nil, fmt.Errorf("line 1: unknown column %s (known: arrival_ms, class, cpu_ms, deadline_ms, kind)", quote(h))
		}
	}
	for _, need := range []string{"arrival_ms", "class", "cpu_ms"} {
		if _, ok := col[need]; !ok {
			return nil, fmt.Errorf("line 1: no %q column (the header must name arrival_ms, class and cpu_ms)", need)
		}
	}
	return col, nil
}

// traceRow is one request's line of a trace: its fields, the header's
// columns, its line number.
type traceRow struct {
	rec  []string
	col  map[string]int
	line int
}

// field is the named column's value ("" when absent).
func (t traceRow) field(name string) string {
	if i, ok := t.col[name]; ok && i < len(t.rec) {
		return strings.TrimSpace(t.rec[i])
	}
	return ""
}

// ms is the named column as a duration of milliseconds (0 when absent
// and not required), bounded by MaxSpan (cpu_ms: MaxCPU).
func (t traceRow) ms(name string, required bool) (time.Duration, error) {
	s := t.field(name)
	if s == "" && !required {
		return 0, nil
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, fmt.Errorf("line %d: %s %s: want a number of milliseconds >= 0", t.line, name, quote(s))
	}
	bound := MaxSpan
	if name == "cpu_ms" {
		bound = MaxCPU
	}
	if v > float64(bound.Milliseconds()) {
		return 0, fmt.Errorf("line %d: %s %s: at most %v", t.line, name, quote(s), bound)
	}
	return time.Duration(v * 1e6), nil
}

// request is the row's request, or the error that refuses the line.
func (t traceRow) request() (Request, error) {
	var q Request
	var err error
	if q.At, err = t.ms("arrival_ms", true); err != nil {
		return q, err
	}
	if q.CPU, err = t.ms("cpu_ms", true); err != nil {
		return q, err
	}
	if q.CPU <= 0 {
		return q, fmt.Errorf("line %d: cpu_ms %s: must be > 0", t.line, quote(t.field("cpu_ms")))
	}
	if q.Deadline, err = t.ms("deadline_ms", false); err != nil {
		return q, err
	}
	if q.Class, err = ParseClass(t.field("class")); err != nil {
		if len(t.field("class")) > 32 {
			return q, fmt.Errorf("line %d: class %s: want critical, interactive, batch or background", t.line, quote(t.field("class")))
		}
		return q, fmt.Errorf("line %d: %w", t.line, err)
	}
	q.Kind = t.field("kind")
	if len(q.Kind) > MaxKindBytes {
		return q, fmt.Errorf("line %d: kind %s: at most %d bytes", t.line, quote(q.Kind), MaxKindBytes)
	}
	return q, nil
}

// The bounds of a trace (ReadCSV).
const (
	MaxTraceBytes = 256 << 20
	MaxLineBytes  = 4096
	MaxKindBytes  = 64
	MaxKinds      = 1000
	MaxCPU        = time.Hour
	MaxSpan       = 100 * 365 * 24 * time.Hour
)

// lineBound reads r, failing once it has given MaxTraceBytes or a line
// grows past MaxLineBytes; line is the line being read (from 1).
type lineBound struct {
	r         io.Reader
	n, inLine int
	line      int
	err       error
}

func (b *lineBound) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.r.Read(p)
	for i := 0; i < n; i++ {
		if b.line == 0 {
			b.line = 1
		}
		b.n++
		b.inLine++
		switch {
		case b.n > MaxTraceBytes:
			b.err = fmt.Errorf("line %d: the trace is longer than %d MiB", b.line, MaxTraceBytes>>20)
		case b.inLine > MaxLineBytes:
			b.err = fmt.Errorf("line %d: longer than %d bytes", b.line, MaxLineBytes)
		case p[i] == '\n':
			b.line++
			b.inLine = 0
			continue
		default:
			continue
		}
		return i, b.err
	}
	return n, err
}

// wrap returns the bound's own error for err, a read's, when the bound
// caused it.
func (b *lineBound) wrap(err error) error {
	if b.err != nil {
		return b.err
	}
	return err
}

// quote quotes s for an error, cut to its first 32 bytes.
func quote(s string) string {
	if len(s) > 32 {
		return strconv.Quote(s[:32]) + fmt.Sprintf("… (%d bytes)", len(s))
	}
	return strconv.Quote(s)
}

// maxArrivals bounds the requests a scenario generates.
const maxArrivals = 2_000_000

// ParseClass reads a class name.
func ParseClass(s string) (Class, error) {
	for c := range Class(admission.NumClasses) {
		if strings.EqualFold(s, c.String()) {
			return c, nil
		}
	}
	return 0, fmt.Errorf("class %q: want critical, interactive, batch or background", s)
}

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
