package sim

import (
	"bufio"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cpuwork/cpuwork/internal/admission"
)

// DeclaredMatrix is the grid `cpuwork simulate --matrix` runs, fixed
// before any result was seen: its dimensions, the policies, and each
// trim with its reason.
//
//go:embed matrix.txt
var DeclaredMatrix string

// Matrix is a declared grid of cells: every combination of its
// dimensions' values that no Trim removes.
type Matrix struct {
	Slots      []int
	Shapes     []string
	Loads      []string  // multiples of capacity ("0.8"), or "step": 0.8, then 3, then 0.8, a third of the cell each
	Mixes      []string  // one, mixed, tenants
	Objectives []float64 // multiples of the median service time
	Policies   []string  // the peers and cpuwork's two modes; the clairvoyant limit always runs
	Requests   int       // open-loop arrivals per cell (its duration follows from the rate)
	Median     time.Duration
	Trims      []Trim
}

// Trim removes every cell that matches all of its conditions (a
// dimension's listed values); Reason says why, and never by a result.
type Trim struct {
	When   map[string][]string
	Reason string
}

// Cell is one point of the matrix.
type Cell struct {
	Slots     int     `json:"slots"`
	Shape     string  `json:"shape"`
	Load      string  `json:"load"`
	Mix       string  `json:"mix"`
	Objective float64 `json:"objective"` // multiples of the median service time
}

func (c Cell) String() string {
	return fmt.Sprintf("slots=%d shape=%s load=%s mix=%s objective=%gx", c.Slots, c.Shape, c.Load, c.Mix, c.Objective)
}

// Shapes of service time, each with the given median.
var shapes = []string{"constant", "exponential", "bimodal", "lognormal", "pareto"}

// Mixes of requests.
var mixes = []string{"one", "mixed", "tenants"}

// ParseMatrix reads a matrix file: lines of "slots 1 2 4", "shapes …",
// "loads …", "mixes …", "objectives …", "policies …", "requests N",
// "median 10ms", and "trim dim=v,v dim=v: reason"; # starts a comment.
func ParseMatrix(r io.Reader) (*Matrix, error) {
	m := &Matrix{}
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		text := sc.Text()
		if i := strings.IndexByte(text, '#'); i >= 0 {
			text = text[:i]
		}
		f := strings.Fields(text)
		if len(f) == 0 {
			continue
		}
		if err := m.parseLine(text, f); err != nil {
			return nil, fmt.Errorf("matrix line %d: %w", line, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	switch {
	case len(m.Slots) == 0 || len(m.Shapes) == 0 || len(m.Loads) == 0 || len(m.Mixes) == 0 || len(m.Objectives) == 0:
		return nil, errors.New("matrix: slots, shapes, loads, mixes and objectives each need a value")
	case len(m.Policies) == 0:
		return nil, errors.New("matrix: no policies")
	case !slices.Contains(m.Policies, "cpuwork") && !slices.Contains(m.Policies, "cpuwork-target"):
		return nil, errors.New("matrix: policies must include cpuwork or cpuwork-target")
	}
	if m.Requests == 0 {
		m.Requests = 10000
	}
	if m.Median == 0 {
		m.Median = 10 * time.Millisecond
	}
	return m, nil
}

// parseLine reads one line of a matrix file into m: text, split into
// fields f (f[0] the key).
func (m *Matrix) parseLine(text string, f []string) error {
	switch f[0] {
	case "slots":
		for _, v := range f[1:] {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > MaxSlots {
				return fmt.Errorf("slots %q: want 1 to %d", v, MaxSlots)
			}
			m.Slots = append(m.Slots, n)
		}
	case "shapes":
		if err := oneOf("shape", f[1:], shapes); err != nil {
			return err
		}
		m.Shapes = f[1:]
	case "loads":
		for _, v := range f[1:] {
			if v == "step" {
				continue
			}
			if x, err := strconv.ParseFloat(v, 64); err != nil || x <= 0 || x > 100 {
				return fmt.Errorf("load %q: want a multiple of capacity in (0, 100] or step", v)
			}
		}
		m.Loads = f[1:]
	case "mixes":
		if err := oneOf("mix", f[1:], mixes); err != nil {
			return err
		}
		m.Mixes = f[1:]
	case "objectives":
		for _, v := range f[1:] {
			x, err := strconv.ParseFloat(v, 64)
			if err != nil || x < 1 || x > 1000 {
				return fmt.Errorf("objective %q: want a multiple of the median from 1 to 1000", v)
			}
			m.Objectives = append(m.Objectives, x)
		}
	case "policies":
		for _, v := range f[1:] {
			if pol, _ := matrixPolicy(v); pol == "" {
				return fmt.Errorf("policy %q: want cpuwork, cpuwork-target or a peer (%s)", v, policyNames())
			}
		}
		m.Policies = f[1:]
	case "requests":
		n, err := strconv.Atoi(strings.Join(f[1:], ""))
		if err != nil || n < 100 || n > maxArrivals {
			return fmt.Errorf("requests %q: want 100 to %d", strings.Join(f[1:], " "), maxArrivals)
		}
		m.Requests = n
	case "median":
		d, err := time.ParseDuration(strings.Join(f[1:], ""))
		if err != nil || d <= 0 {
			return fmt.Errorf("median %q: want a positive duration", strings.Join(f[1:], " "))
		}
		m.Median = d
	case "trim":
		t, err := parseTrim(text)
		if err != nil {
			return err
		}
		m.Trims = append(m.Trims, t)
	default:
		return fmt.Errorf("unknown key %q", f[0])
	}
	return nil
}

// parseTrim reads a trim line: "trim dim=v,v dim=v: reason".
func parseTrim(text string) (Trim, error) {
	rest := strings.TrimSpace(text[strings.Index(text, "trim")+4:])
	conds, reason, ok := strings.Cut(rest, ":")
	reason = strings.TrimSpace(reason)
	if !ok || reason == "" {
		return Trim{}, errors.New(`a trim needs its reason: "trim dim=v,v …: reason"`)
	}
	t := Trim{When: map[string][]string{}, Reason: reason}
	for _, c := range strings.Fields(conds) {
		k, v, ok := strings.Cut(c, "=")
		if !ok || !slices.Contains([]string{"slots", "shape", "load", "mix", "objective"}, k) {
			return Trim{}, fmt.Errorf("trim condition %q: want slots=, shape=, load=, mix= or objective=", c)
		}
		t.When[k] = strings.Split(v, ",")
	}
	if len(t.When) == 0 {
		return Trim{}, errors.New("a trim with no condition would remove every cell")
	}
	return t, nil
}

// oneOf reports the first of vals that is not in known.
func oneOf(what string, vals, known []string) error {
	for _, v := range vals {
		if !slices.Contains(known, v) {
			return fmt.Errorf("%s %q: want one of %s", what, v, strings.Join(known, ", "))
		}
	}
	return nil
}

// matrixPolicy maps a matrix policy name to the replay's policy and
// whether cpuwork runs as the middleware does: its requests carry the
// objective as their target and no ctx deadline (the client's giving up
// reaches it as a withdrawal); as the executor's callers run it, the
// client's deadline is in the request's context.
func matrixPolicy(name string) (policy string, targets bool) {
	switch name {
	case "cpuwork":
		return "cpuwork", false
	case "cpuwork-target":
		return "cpuwork", true
	case "clairvoyant":
		return "", false // always run; not a listed policy
	}
	if KnownPolicy(name) {
		return name, false
	}
	return "", false
}

// KnownPolicy reports whether name is one of Policies.
func KnownPolicy(name string) bool {
	for _, p := range Policies {
		if p.Name == name {
			return true
		}
	}
	return false
}

// Cells lists the matrix's cells in a fixed order, trims applied, and
// how many each trim removed.
func (m *Matrix) Cells() (cells []Cell, trimmed []int) {
	trimmed = make([]int, len(m.Trims))
	for _, mix := range m.Mixes {
		for _, shape := range m.Shapes {
			for _, load := range m.Loads {
				for _, obj := range m.Objectives {
					for _, n := range m.Slots {
						c := Cell{Slots: n, Shape: shape, Load: load, Mix: mix, Objective: obj}
						if i := m.trimOf(c); i >= 0 {
							trimmed[i]++
							continue
						}
						cells = append(cells, c)
					}
				}
			}
		}
	}
	return cells, trimmed
}

func (m *Matrix) trimOf(c Cell) int {
	vals := map[string]string{"slots": strconv.Itoa(c.Slots), "shape": c.Shape, "load": c.Load, "mix": c.Mix, "objective": strconv.FormatFloat(c.Objective, 'g', -1, 64)}
	for i, t := range m.Trims {
		all := true
		for k, vs := range t.When {
			if !slices.Contains(vs, vals[k]) {
				all = false
				break
			}
		}
		if all {
			return i
		}
	}
	return -1
}

// Workload builds a cell's workload: Requests open-loop arrivals
// (Poisson) of service times of the cell's shape, each client giving up
// at the objective; beside closed-loop batch in a mixed cell; from ten
// tenants, one sending five times its share, in a tenants cell. Its seed
// comes from the cell, so a cell is the same workload in every run.
func (m *Matrix) Workload(c Cell) (*Workload, error) {
	seed := uint64(c.Slots)*1_000_003 + uint64(slices.Index(shapes, c.Shape))*10_007 + uint64(slices.Index(mixes, c.Mix))*101 + uint64(c.Objective*1000)
	for _, b := range []byte(c.Load) {
		seed = seed*31 + uint64(b)
	}
	rng := rand.New(rand.NewPCG(seed, 0x6d6174726978)) // "matrix"
	med := float64(m.Median)
	cpu := make([]time.Duration, m.Requests)
	sum := 0.0
	for i := range cpu {
		x := med
		switch c.Shape {
		case "exponential":
			x = rng.ExpFloat64() * med / math.Ln2
		case "bimodal":
			if rng.Float64() < 0.1 {
				x = 10 * med
			}
		case "lognormal":
			x = med * math.Exp(rng.NormFloat64())
		case "pareto":
			// x_m * U^(-1/α) with the median at med: x_m = med / 2^(1/α).
			const alpha = 1.5
			x = min(100*med, med/math.Pow(2, 1/alpha)*math.Pow(1-rng.Float64(), -1/alpha))
		}
		cpu[i] = max(time.Microsecond, time.Duration(x))
		sum += float64(cpu[i])
	}
	mean := sum / float64(len(cpu))
	obj := time.Duration(c.Objective * med)
	w := &Workload{Name: c.String(), Slots: c.Slots}
	w.Objective[admission.Interactive] = obj
	// Arrivals: each phase at its load, the rate in requests per ns.
	rate := func(l float64) float64 { return l * float64(c.Slots) / mean }
	phases := []float64{0}
	if c.Load == "step" {
		phases = []float64{0.8, 3, 0.8}
	} else {
		phases[0], _ = strconv.ParseFloat(c.Load, 64)
	}
	per := len(cpu) / len(phases)
	t := 0.0
	tenantRate := []float64{5}
	for range 9 {
		tenantRate = append(tenantRate, 1)
	}
	for i := range cpu {
		ph := min(i/per, len(phases)-1)
		if c.Load == "step" && i == per {
			w.StepAt = time.Duration(t)
		}
		if c.Load == "step" && i == 2*per {
			w.stepEnd = time.Duration(t)
		}
		t += rng.ExpFloat64() / rate(phases[ph])
		r := Request{At: time.Duration(t), Class: admission.Interactive, CPU: cpu[i], Deadline: obj}
		if c.Mix == "tenants" {
			// Tenant 0 sends 5 of every 14 requests: five times its
			// tenth share; the nine others one each.
			k := 0
			for u, acc := rng.Float64()*14, 0.0; k < 10; k++ {
				acc += tenantRate[k]
				if u < acc {
					break
				}
			}
			r.Key = "t" + strconv.Itoa(min(k, 9))
			r.Kind = "tenant-others"
			if k == 0 {
				r.Kind = "tenant-flood"
			}
		}
		w.Requests = append(w.Requests, r)
	}
	w.Duration = time.Duration(t) + time.Nanosecond
	if c.Mix == "mixed" {
		w.Loops = []Loop{{Class: admission.Batch, CPU: 5 * m.Median, Clients: c.Slots, Kind: "batch", Checkpoint: m.Median / 10}}
	}
	return w, w.Validate()
}

// CellResult is one cell's replays: each policy's figures, the best
// peer by the cell's question, and the clairvoyant limit.
type CellResult struct {
	Cell
	Results  map[string]PolicyFigures `json:"results"`
	BestPeer string                   `json:"best_peer"`
	Limit    float64                  `json:"limit"`      // the clairvoyant policy's goodput
	Longest  float64                  `json:"longest_s"`  // the longest request's CPU time
	Duration float64                  `json:"duration_s"` // time 0 to just past the last arrival, s: goodput's divisor
	// Blind is the size-blind bound on the open-loop goodput
	// (blindBound), BlindOthers on the nine honest tenants' in a
	// tenants cell.
	Blind       float64 `json:"blind_bound"`
	BlindOthers float64 `json:"blind_bound_others,omitempty"`
}

// blindBound is the goodput within the objective (CPU-s per s, over
// w.Duration) that a policy can get in w when it cannot see a request's
// CPU time before running it and runs every request it starts to its
// end, as every modelled peer and cpuwork without a declared Service
// do. Whether such a policy starts a request cannot depend on that
// request's size, so the requests it starts are, as to their sizes, a
// random draw from the trace: of the CPU it spends on them (at most
// what they offer, and at most the slots' CPU until the last one could
// end within its objective behind the longest), the share spent on
// requests that fit their objective on their own is the trace's share
// in expectation, and no other request counts. The bound allows that
// share three standard errors of luck in a draw of as many requests as
// the spend buys (a ratio estimate, without replacement), so that a
// policy exceeds it only by a draw that unlikely. kind "" takes every
// open-loop request, otherwise those of that kind.
func blindBound(w *Workload, kind string) float64 {
	var obj time.Duration
	for _, o := range w.Objective {
		obj = max(obj, o)
	}
	var n int
	var offered, fits, longest float64
	for _, r := range w.Requests {
		if kind != "" && r.Kind != kind {
			continue
		}
		cpu := r.CPU.Seconds()
		n++
		offered += cpu
		longest = max(longest, cpu)
		if r.CPU <= w.Objective[r.Class] {
			fits += cpu
		}
	}
	if offered == 0 {
		return 0
	}
	share := fits / offered
	dur := w.Duration.Seconds()
	spend := min(offered, float64(w.Slots)*(dur+obj.Seconds()+longest))
	mean := offered / float64(n)
	if m := spend / mean; m < float64(n) {
		// The ratio estimate's variance over a draw of m of the n:
		// (1 - m/n) / m times the variance of y - share*x, over mean².
		var ss float64
		for _, r := range w.Requests {
			if kind != "" && r.Kind != kind {
				continue
			}
			x := r.CPU.Seconds()
			y := 0.0
			if r.CPU <= w.Objective[r.Class] {
				y = x
			}
			ss += (y - share*x) * (y - share*x)
		}
		v := (1 - m/float64(n)) / m * ss / float64(n-1) / (mean * mean)
		share = min(1, share+3*math.Sqrt(v))
	}
	return share * spend / dur
}

// PolicyFigures is what one policy got in a cell. Goodput is CPU-s of
// work served within the objective per s (the open-loop requests; in a
// tenants cell, the nine tenants within their share, in Others);
// refused counts refused and given-up requests as a share of them.
type PolicyFigures struct {
	Goodput    float64 `json:"goodput"`
	P99Served  Seconds `json:"p99_served_s"`
	P99All     Seconds `json:"p99_all_s"` // null: over 1 % never answered
	Refused    float64 `json:"refused"`
	Others     float64 `json:"others_goodput,omitempty"` // tenants: the nine others'
	BatchWork  float64 `json:"batch_work,omitempty"`     // mixed: batch CPU-s per s served
	BatchBound float64 `json:"batch_bound,omitempty"`    // mixed: slots less the open-loop CPU-s per s served
	Recovery   float64 `json:"recovery_s,omitempty"`     // step: s from the step until served p99 stays under the objective
}

// Seconds is a duration in seconds whose JSON is null when it is not a
// number or infinite (a p99 of all requests past the answered ones).
type Seconds float64

// MarshalJSON writes s, or null.
func (s Seconds) MarshalJSON() ([]byte, error) {
	if math.IsNaN(float64(s)) || math.IsInf(float64(s), 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, float64(s), 'g', 6, 64), nil
}

// Primary is the figure the cell's question judges: the nine honest
// tenants' goodput in a tenants cell, else the open-loop goodput.
func (c *CellResult) Primary(policy string) float64 {
	f := c.Results[policy]
	if c.Mix == "tenants" {
		return f.Others
	}
	return f.Goodput
}

// Run replays every cell through every policy, on workers goroutines.
func (m *Matrix) Run(workers int) ([]CellResult, error) {
	cells, _ := m.Cells()
	out := make([]CellResult, len(cells))
	errs := make([]error, len(cells))
	var wg sync.WaitGroup
	next := make(chan int)
	for range max(1, workers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				out[i], errs[i] = m.runCell(cells[i])
			}
		}()
	}
	for i := range cells {
		next <- i
	}
	close(next)
	wg.Wait()
	return out, errors.Join(errs...)
}

func (m *Matrix) runCell(c Cell) (CellResult, error) {
	w, err := m.Workload(c)
	if err != nil {
		return CellResult{}, fmt.Errorf("%v: %w", c, err)
	}
	cr := CellResult{Cell: c, Results: map[string]PolicyFigures{}}
	for _, r := range w.Requests {
		cr.Longest = max(cr.Longest, r.CPU.Seconds())
	}
	cr.Duration = w.Duration.Seconds()
	cr.Blind = blindBound(w, "")
	if c.Mix == "tenants" {
		cr.BlindOthers = blindBound(w, "tenant-others")
	}
	for _, name := range append(slices.Clone(m.Policies), "clairvoyant") {
		pol, targets := matrixPolicy(name)
		if name == "clairvoyant" {
			pol = "clairvoyant"
		}
		wl := *w
		wl.Targets, wl.HideDeadline = targets, targets
		s, err := replay(&wl, pol)
		if err != nil {
			return CellResult{}, fmt.Errorf("%v, %s: %w", c, name, err)
		}
		cr.Results[name] = figures(s, c)
		s.recycle()
	}
	best := -1.0
	for _, name := range m.Policies {
		if strings.HasPrefix(name, "cpuwork") {
			continue
		}
		if v := cr.Primary(name); v > best {
			best, cr.BestPeer = v, name
		}
	}
	cr.Limit = cr.Results["clairvoyant"].Goodput
	return cr, nil
}

// figures reads a replay into a cell's figures.
func figures(s *sim, c Cell) PolicyFigures {
	var f PolicyFigures
	obj := int64(s.wl.Objective[admission.Interactive])
	dur := s.wl.Duration.Seconds()
	lats := make([]float64, 0, len(s.jobs))
	all := make([]float64, 0, len(s.jobs))
	var n, bad int
	var openCPU float64
	type win struct{ lat []float64 }
	var wins map[int64]*win
	// Recovery is read in windows of two median service times by arrival.
	width := max(int64(float64(obj)/c.Objective*2), 1)
	if s.wl.StepAt > 0 {
		wins = map[int64]*win{}
	}
	for _, j := range s.jobs {
		if j.loop >= 0 {
			if j.out == served {
				f.BatchWork += j.CPU.Seconds() / dur
			}
			continue
		}
		n++
		lat := math.Inf(1)
		switch j.out {
		case served:
			lat = float64(j.end-j.arrival) / 1e9
			lats = append(lats, lat)
			openCPU += j.CPU.Seconds() / dur
			if j.end-j.arrival <= obj {
				f.Goodput += j.CPU.Seconds() / dur
				if j.Kind == "tenant-others" {
					f.Others += j.CPU.Seconds() / dur
				}
			}
			if wins != nil && j.At >= s.wl.StepAt && j.At < s.wl.stepEnd {
				k := int64(j.At-s.wl.StepAt) / width
				if wins[k] == nil {
					wins[k] = &win{}
				}
				wins[k].lat = append(wins[k].lat, float64(j.end-j.arrival))
			}
		default:
			bad++
		}
		all = append(all, lat)
	}
	slices.Sort(lats)
	slices.Sort(all)
	f.P99Served, f.P99All = Seconds(quantile(lats, 0.99)), Seconds(quantile(all, 0.99))
	if math.IsNaN(float64(f.P99Served)) {
		f.P99Served = 0
	}
	if n > 0 {
		f.Refused = float64(bad) / float64(n)
	}
	if c.Mix == "mixed" {
		f.BatchBound = max(0, float64(c.Slots)-openCPU)
	}
	if wins != nil {
		last := int64(-1)
		for k, w := range wins {
			slices.Sort(w.lat)
			if quantile(w.lat, 0.99) > float64(obj) && k > last {
				last = k
			}
		}
		f.Recovery = time.Duration((last + 1) * width).Seconds()
	}
	return f
}
