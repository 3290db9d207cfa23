package bench

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
)

func TestABBAReversesEveryOtherBlock(t *testing.T) {
	order := []string{"a", "b", "c"}
	var got []string
	for block := range 4 {
		got = append(got, abba(order, block)...)
	}
	want := []string{"a", "b", "c", "c", "b", "a", "a", "b", "c", "c", "b", "a"}
	if !slices.Equal(got, want) {
		t.Errorf("blocks %v, want %v", got, want)
	}
	if !slices.Equal(order, []string{"a", "b", "c"}) {
		t.Errorf("abba changed its argument: %v", order)
	}
}

// searchServer is a fake load scenario for the capacity search: a variant
// with capacity c answers the share 0.99 + 0.001 (c - rate) of its
// requests within the objective (at most all), so its capacity at the
// objective is c exactly, and linear interpolation between two steps
// within 10/s of it finds it.
type searchServer struct {
	capacity map[string]float64 // variant -> its capacity at the objective
	fail     map[string]float64 // variant -> a rate at which its run fails
	runs     map[string][]float64
}

func (f *searchServer) once(v *Variant, variant string, rate float64) error {
	name, _, _ := strings.Cut(v.Name, "@")
	f.runs[name] = append(f.runs[name], rate)
	if r, ok := f.fail[name]; ok && rate >= r {
		return errors.New("the server crashed")
	}
	v.addRun(newHist(), nil, usage{})
	v.OfferedPS, v.AchievedPS = rate, rate
	rp := &v.Repeats[len(v.Repeats)-1]
	rp.Extra = map[string]float64{"within_objective_share": min(1, meetsShare+0.001*(f.capacity[variant]-rate))}
	return nil
}

// The search offers each variant the next step while it meets the
// objective, alternating the variants, and records on its 80 % run the
// capacity interpolated between the last step met and the first missed;
// met at every step, a lower bound; missed at the first, an upper bound;
// a failed run, no capacity that round. The comparison is judged on it.
func TestTheCapacitySearchFindsEachVariantsCapacity(t *testing.T) {
	r := &Runner{rounds: 2, maxRounds: 2, search: true}
	s := &Scenario{Name: "load"}
	vs := []struct{ name, desc string }{{"naive", ""}, {"pool", ""}, {"cpuwork", ""}}
	f := &searchServer{
		capacity: map[string]float64{"naive": 70, "pool": 95, "cpuwork": 150},
		runs:     map[string][]float64{},
	}
	checks := func() []check { return []check{capacityCheck("", "", 0.1, []string{"naive", "pool"}, "pool")} }
	r.atLoads(s, vs, []float64{0.8, 2}, "pool", checks, func(int) calibration { return calibration{capacity: 100} }, f.once)

	want := map[string]struct {
		capacity float64
		bound    float64
		runs     []float64 // per round: the levels (80, 200) in either order, then the search's steps
	}{
		"naive":   {80, -1, nil},
		"pool":    {95, 0, []float64{90, 100}},
		"pool-aa": {95, 0, []float64{90, 100}},
		"cpuwork": {140, 1, []float64{90, 100, 110, 125, 140}},
	}
	for name, w := range want {
		v := s.variant(name + "@80%")
		for i, rp := range v.Repeats {
			if got := rp.Extra[capacityMetric]; math.Abs(got-w.capacity) > 1e-6 || rp.Extra[capacityBoundKey] != w.bound {
				t.Errorf("%s repeat %d: capacity %v (bound %v), want %v (bound %v)", name, i+1, got, rp.Extra[capacityBoundKey], w.capacity, w.bound)
			}
		}
		var search []float64
		for _, rate := range f.runs[name] {
			if rate != 80 && rate != 200 {
				search = append(search, rate)
			}
		}
		if wantRuns := slices.Concat(w.runs, w.runs); !slices.Equal(search, wantRuns) {
			t.Errorf("%s searched at %v, want %v", name, search, wantRuns)
		}
	}
	judgeChecks(s, checks())
	c := s.Checks[0]
	// cpuwork's lower bound (140) against the pool's 95: better, which a
	// lower bound supports.
	if c.Verdict != Better || c.BestAlternative != "pool@80%" || math.Abs(c.Estimate-140.0/95) > 1e-6 || c.Pairs != 2 {
		t.Errorf("capacity check: %s", c.line())
	}
	if !strings.Contains(s.Notes[len(s.Notes)-1], "capacity search, repeat 2") {
		t.Errorf("no search note: %q", s.Notes)
	}
}

// A variant whose search run fails has no capacity in that round: the
// pair is left out of the comparison, not judged on a guess.
func TestACapacitySearchRunThatFailsLeavesThePairOut(t *testing.T) {
	r := &Runner{rounds: 2, maxRounds: 2, search: true}
	s := &Scenario{Name: "load"}
	vs := []struct{ name, desc string }{{"pool", ""}, {"cpuwork", ""}}
	f := &searchServer{
		capacity: map[string]float64{"pool": 95, "cpuwork": 150},
		fail:     map[string]float64{"cpuwork": 110},
		runs:     map[string][]float64{},
	}
	checks := func() []check { return []check{capacityCheck("", "", 0.1, []string{"pool"}, "pool")} }
	r.atLoads(s, vs, []float64{0.8}, "pool", checks, func(int) calibration { return calibration{capacity: 100} }, f.once)
	for i, rp := range s.variant("cpuwork@80%").Repeats {
		if _, ok := rp.Extra[capacityMetric]; ok {
			t.Errorf("repeat %d: a capacity recorded after a failed step: %v", i+1, rp.Extra)
		}
	}
	if !strings.Contains(strings.Join(s.Notes, "\n"), "not measured (the server crashed)") {
		t.Errorf("the notes do not say why: %q", s.Notes)
	}
	judgeChecks(s, checks())
	if c := s.Checks[0]; c.NotJudged == "" || c.Verdict != "" {
		t.Errorf("judged without cpuwork's capacity: %s", c.line())
	}
}

// The judged variant's upper bound supports "worse" only, and the A/A
// control's bound changes nothing.
func TestAJudgedUpperBoundSupportsWorseOnly(t *testing.T) {
	mk := func(cw, cwBound float64) *Scenario {
		s := synth(map[string]map[string][]float64{
			"cpuwork@80%": {capacityMetric: jitter(cw, 4), capacityBoundKey: {cwBound}},
			"pool@80%":    {capacityMetric: jitter(100, 4)},
			"pool-aa@80%": {capacityMetric: jitter(100, 4), capacityBoundKey: {1}},
		})
		return s
	}
	c := capacityCheck("", "", 0.1, []string{"pool"}, "pool")
	s := mk(50, -1) // at most 50 against 100: worse stands
	judgeChecks(s, []check{c})
	if got := s.Checks[0].Verdict; got != Worse {
		t.Errorf("an upper bound half the pool's: %s, want worse: %s", got, s.Checks[0].line())
	}
	s = mk(200, -1) // at most 200: better is not supported
	judgeChecks(s, []check{c})
	if got := s.Checks[0].Verdict; got != Inconclusive {
		t.Errorf("an upper bound twice the pool's: %s, want inconclusive: %s", got, s.Checks[0].line())
	}
	s = mk(200, 0) // measured: the A/A control's lower bound does not matter
	judgeChecks(s, []check{c})
	if got := s.Checks[0].Verdict; got != Better {
		t.Errorf("measured twice the pool's, with the A/A control a bound: %s, want better: %s", got, s.Checks[0].line())
	}
}

func TestCapacityDrift(t *testing.T) {
	cals := []calibration{{capacity: 100}, {capacity: 110}, {capacity: 90}}
	if got := capacityDrift(cals); math.Abs(got-0.2) > 1e-9 {
		t.Errorf("drift %v, want 0.2", got)
	}
	if got := capacityDrift(append(cals, calibration{capacity: 100, failure: "x"})); got != 0 {
		t.Errorf("with a failed calibration: %v, want 0", got)
	}
}

// Only the best alternative's upper bound restricts a verdict: another
// alternative's true value is below its bound, below the best's, and
// changes nothing (naive@80% an upper bound made a synthetic 0.72x
// [0.71-0.72] inconclusive). Any alternative's lower bound still does:
// its true value may be above the best's.
func TestOnlyTheBestAlternativesUpperBoundRestricts(t *testing.T) {
	mk := func(naiveBound float64) *Scenario {
		return synth(map[string]map[string][]float64{
			"cpuwork@80%": {capacityMetric: jitter(72, 4)},
			"pool@80%":    {capacityMetric: jitter(100, 4)},
			"naive@80%":   {capacityMetric: jitter(60, 4), capacityBoundKey: {naiveBound}},
			"pool-aa@80%": {capacityMetric: jitter(100, 4)},
		})
	}
	c := capacityCheck("", "", 0.1, []string{"pool", "naive"}, "pool")
	s := mk(-1) // naive at most 60: the best is the pool whatever naive's true value
	judgeChecks(s, []check{c})
	if got := s.Checks[0]; got.Verdict != Worse || got.BestAlternative != "pool@80%" {
		t.Errorf("a non-best alternative's upper bound: %s", got.line())
	}
	s = mk(1) // naive at least 60: it may be above the pool, so worse is not supported... but better would be
	judgeChecks(s, []check{c})
	if got := s.Checks[0]; got.Verdict != Worse {
		t.Errorf("a non-best alternative's lower bound with the judged variant below the best: %s, want worse (a lower bound supports worse)", got.line())
	}
}
