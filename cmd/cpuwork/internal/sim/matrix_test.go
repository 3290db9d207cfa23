package sim

import (
	"bytes"
	"flag"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cpuwork/cpuwork/internal/admission"
)

var update = flag.Bool("update", false, "rewrite testdata/matrix-ci.json from this build's replays")

// The reduced matrix's every figure is held in a checked-in file: a
// change to the door, the ordering or a peer's model that moves any cell
// fails here until the file is regenerated (go test -run
// TestTheReducedMatrixIsUnchanged -update) and the change reviewed.
func TestTheReducedMatrixIsUnchanged(t *testing.T) {
	f, err := os.Open("testdata/matrix-ci.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := ParseMatrix(f)
	if err != nil {
		t.Fatal(err)
	}
	res, err := m.Run(2)
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if err := WriteMatrixJSON(&got, res); err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile("testdata/matrix-ci.json", got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile("testdata/matrix-ci.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		g, w := strings.Split(got.String(), "\n"), strings.Split(string(want), "\n")
		for i := range min(len(g), len(w)) {
			if g[i] != w[i] {
				t.Fatalf("the reduced matrix changed at line %d:\n got %s\nwant %s\n(rerun with -update once the change is meant, and say so in the commit)", i+1, g[i], w[i])
			}
		}
		t.Fatalf("the reduced matrix changed: %d lines, want %d", len(g), len(w))
	}
	// No policy that cannot see a request's size gets past the size-blind
	// bound, cpuwork's modes included (none is given a Service).
	for _, c := range res {
		for name, f := range c.Results {
			if name == "clairvoyant" {
				continue
			}
			if f.Goodput > c.Blind*(1+1e-9) {
				t.Errorf("%v, %s: goodput %.4f over the size-blind bound %.4f", c.Cell, name, f.Goodput, c.Blind)
			}
			if c.Mix == "tenants" && f.Others > c.BlindOthers*(1+1e-9) {
				t.Errorf("%v, %s: the nine tenants' goodput %.4f over their size-blind bound %.4f", c.Cell, name, f.Others, c.BlindOthers)
			}
		}
	}
	// The report prints every worse cell and the targets for both modes.
	var rep bytes.Buffer
	WriteMatrixReport(&rep, m, res, 0)
	for _, want := range []string{"cpuwork by slots:", "cpuwork-target by mix:", "The targets:", "Every cell where cpuwork is worse"} {
		if !strings.Contains(rep.String(), want) {
			t.Errorf("the report has no %q:\n%s", want, rep.String())
		}
	}
}

// The size-blind bound: with the CPU to serve every request, the
// fitting requests' work exactly; in overload, a share that random
// draws of as many requests as the slots' CPU buys exceed no more often
// than three standard errors allow (0.13 % one-sided for a normal
// estimate; 0.5 % is asked of 4,000 draws).
func TestTheSizeBlindBound(t *testing.T) {
	ms := time.Millisecond
	w := &Workload{Slots: 1, Duration: 10 * time.Second}
	w.Objective[admission.Interactive] = 10 * ms
	for i := range 10 {
		cpu := ms
		if i%2 == 1 {
			cpu = 100 * ms
		}
		w.Requests = append(w.Requests, Request{At: time.Duration(i) * time.Second, Class: admission.Interactive, CPU: cpu})
	}
	if got, want := blindBound(w, ""), 0.005/10; math.Abs(got-want) > 1e-12 {
		t.Errorf("room for every request: bound %v, want the fitting work over the duration, %v", got, want)
	}

	// 2,000 requests, a fifth of them 20x longer than the objective, on
	// one slot for 10 s: the slot's CPU buys about a seventh of them
	// (the matrix's cells draw hundreds to thousands).
	rng := rand.New(rand.NewPCG(1, 2))
	w = &Workload{Slots: 1, Duration: 10 * time.Second}
	w.Objective[admission.Interactive] = 10 * ms
	for range 2000 {
		cpu := time.Duration(1+rng.IntN(9)) * ms
		if rng.IntN(5) == 0 {
			cpu = 200 * ms
		}
		w.Requests = append(w.Requests, Request{Class: admission.Interactive, CPU: cpu})
	}
	bound := blindBound(w, "")
	obj := w.Objective[admission.Interactive]
	spend := float64(w.Slots) * (w.Duration + obj + 200*ms).Seconds()
	over := 0
	const draws = 4000
	for range draws {
		// A size-blind policy's pick: requests in a random order until
		// the CPU is spent (the last one runs past it: counted, so the
		// draw is generous to the policy).
		perm := rng.Perm(len(w.Requests))
		var spent, good float64
		for _, k := range perm {
			if spent >= spend {
				break
			}
			r := w.Requests[k]
			spent += r.CPU.Seconds()
			if r.CPU <= obj {
				good += r.CPU.Seconds()
			}
		}
		if good/spent*spend/w.Duration.Seconds() > bound {
			over++
		}
	}
	if over > draws/200 {
		t.Errorf("%d of %d random draws beat the bound %.4f: want at most %d", over, draws, bound, draws/200)
	}
	if bound <= 0 || bound > spend/w.Duration.Seconds() {
		t.Errorf("bound %.4f: want within (0, %.4f]", bound, spend/w.Duration.Seconds())
	}
}

func TestParseMatrixErrors(t *testing.T) {
	base := "slots 2\nshapes constant\nloads 0.8\nmixes one\nobjectives 5\npolicies cpuwork pool\n"
	for _, c := range []struct{ text, want string }{
		{base + "trim slots=2\n", "needs its reason"},
		{base + "trim speed=2: why\n", "trim condition"},
		{base + "shapes cubic\n", `shape "cubic"`},
		{base + "loads 0\n", `load "0"`},
		{base + "policies cpuwork fastest\n", `policy "fastest"`},
		{base + "requests 5\n", "requests"},
		{base + "colour blue\n", "unknown key"},
		{strings.Replace(base, "policies cpuwork pool", "policies pool", 1), "must include cpuwork"},
		{"slots 2\n", "each need a value"},
	} {
		_, err := ParseMatrix(strings.NewReader(c.text))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want one containing %q", c.text, err, c.want)
		}
	}
	m, err := ParseMatrix(strings.NewReader(DeclaredMatrix))
	if err != nil {
		t.Fatalf("the declared matrix: %v", err)
	}
	cells, _ := m.Cells()
	if len(cells) == 0 {
		t.Fatal("the declared matrix has no cell")
	}
}

// A trim removes exactly the cells matching all its conditions.
func TestTrimsRemoveOnlyTheirCells(t *testing.T) {
	m, err := ParseMatrix(strings.NewReader("slots 1 2\nshapes constant bimodal\nloads 0.8 2\nmixes one\nobjectives 5 20\npolicies cpuwork\ntrim slots=1 load=2: cost\n"))
	if err != nil {
		t.Fatal(err)
	}
	cells, trimmed := m.Cells()
	if len(cells) != 12 || trimmed[0] != 4 {
		t.Fatalf("%d cells, %d trimmed; want 12 and 4", len(cells), trimmed[0])
	}
	for _, c := range cells {
		if c.Slots == 1 && c.Load == "2" {
			t.Errorf("%v was trimmed", c)
		}
	}
}

// Each shape has its declared median (within sampling) and the load its
// rate: the matrix asks what it says it asks.
func TestTheCellsWorkloadsHaveTheirShapeAndLoad(t *testing.T) {
	m := &Matrix{Requests: 20000, Median: 10 * time.Millisecond}
	for _, shape := range shapes {
		w, err := m.Workload(Cell{Slots: 4, Shape: shape, Load: "0.8", Mix: "one", Objective: 5})
		if err != nil {
			t.Fatal(err)
		}
		var cpu []float64
		sum := 0.0
		for _, r := range w.Requests {
			cpu = append(cpu, float64(r.CPU))
			sum += float64(r.CPU)
		}
		slices.Sort(cpu)
		med := cpu[len(cpu)/2]
		if math.Abs(med/float64(10*time.Millisecond)-1) > 0.05 {
			t.Errorf("%s: median %v, want 10ms", shape, time.Duration(med))
		}
		load := sum / float64(w.Duration) / 4
		if math.Abs(load-0.8) > 0.05 {
			t.Errorf("%s: offered load %.3f of 4 slots, want 0.8", shape, load)
		}
		if shape == "pareto" && cpu[len(cpu)-1] > float64(time.Second)+1 {
			t.Errorf("pareto: longest %v, want the cap of 100x the median", time.Duration(cpu[len(cpu)-1]))
		}
	}
	w, _ := m.Workload(Cell{Slots: 4, Shape: "constant", Load: "0.8", Mix: "tenants", Objective: 5})
	flood := 0
	for _, r := range w.Requests {
		if r.Key == "t0" {
			flood++
		}
	}
	if share := float64(flood) / float64(len(w.Requests)); math.Abs(share-5.0/14) > 0.02 {
		t.Errorf("tenants: the flood sends %.3f of the requests, want 5/14", share)
	}
}

// The clairvoyant limit never serves a request past its objective, and
// serves everything at a load its slots keep up with at constant sizes.
func TestTheClairvoyantLimitServesOnlyWithinTheObjective(t *testing.T) {
	m := &Matrix{Requests: 3000, Median: 10 * time.Millisecond}
	for _, load := range []string{"0.5", "2", "step"} {
		w, err := m.Workload(Cell{Slots: 2, Shape: "lognormal", Load: load, Mix: "one", Objective: 5})
		if err != nil {
			t.Fatal(err)
		}
		s, err := replay(w, "clairvoyant")
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range s.jobs {
			if j.out == served && j.end-j.arrival > int64(w.Objective[admission.Interactive]) {
				t.Fatalf("load %s: served in %v, objective %v", load, time.Duration(j.end-j.arrival), w.Objective[admission.Interactive])
			}
			if j.out == pending {
				t.Fatalf("load %s: a request never ended", load)
			}
		}
	}
}

// Gradient2's limit stays within [20, 200]: it grows to the maximum
// while the RTT holds, and falls to the minimum within 100 samples of a
// fourfold rise in the RTT (its long RTT then follows the new level).
func TestGradient2StaysWithinItsBounds(t *testing.T) {
	var now int64
	g := newGradient2(func() int64 { return now })
	for i := range 1100 {
		rtt := 10e6
		if i >= 1000 {
			rtt = 40e6
		}
		if i == 1000 && g.limit != 200 {
			t.Errorf("after 1000 samples of one RTT the limit is %.1f, want 200", g.limit)
		}
		g.update(rtt, int(g.limit))
		if g.limit < 20 || g.limit > 200 {
			t.Fatalf("sample %d: limit %.1f", i, g.limit)
		}
	}
	if g.limit > 30 {
		t.Errorf("100 samples after a 4x rise in RTT the limit is %.1f; want it near its minimum", g.limit)
	}
}

// The matrix's worst cell before the door judged an arrival's own run
// time by its class's median (1 slot, bimodal, 0.5 load beside batch, a
// 5x objective): the class's average run time, pushed past the 50 ms
// objective by two long requests in a row, refused every interactive
// arrival, so no interactive request ran again to bring the average
// back (99.4 % refused, 0.001 CPU-s/s within the objective against the
// clairvoyant limit's 0.234). Batch hands its slot over at its
// Checkpoints. go test -v -run TestTheMatrixsWorstCell prints the
// figures docs/results.md cites.
func TestTheMatrixsWorstCell(t *testing.T) {
	m := &Matrix{Requests: 10000, Median: 10 * time.Millisecond}
	c := Cell{Slots: 1, Shape: "bimodal", Load: "0.5", Mix: "mixed", Objective: 5}
	w, err := m.Workload(c)
	if err != nil {
		t.Fatal(err)
	}
	s, err := replay(w, "cpuwork")
	if err != nil {
		t.Fatal(err)
	}
	p := s.pol.(*granted)
	f := figures(s, c)
	var waits []float64
	for _, j := range s.jobs {
		if j.loop < 0 && j.out == served {
			waits = append(waits, float64(j.start-j.arrival)/1e6)
		}
	}
	slices.Sort(waits)
	lim, err := replay(w, "clairvoyant")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%v: cpuwork refused %.1f %%, goodput %.3f CPU-s/s, %d slots handed over at a Checkpoint, the served waited p50 %.1f ms; first refusal: %s; the limit's goodput %.3f",
		c, 100*f.Refused, f.Goodput, p.handOvers, quantile(waits, 0.5), p.refusal, figures(lim, c).Goodput)
	if p.handOvers == 0 {
		t.Error("batch handed no slot over at a Checkpoint")
	}
	if lim := figures(lim, c).Goodput; f.Refused > 0.5 || f.Goodput < lim/2 {
		t.Errorf("refused %.1f %%, goodput %.3f CPU-s/s against the limit's %.3f: the class is refused whole again", 100*f.Refused, f.Goodput, lim)
	}
}
