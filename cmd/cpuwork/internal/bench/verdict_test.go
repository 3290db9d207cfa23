package bench

import (
	"fmt"
	"github.com/cpuwork/cpuwork/cmd/cpuwork/internal/judge"
	"math"
	"strings"
	"testing"
)

// synth builds a scenario whose variants have the given per-repeat values
// of one metric each: values[variant][metric] = one value per repeat.
func synth(values map[string]map[string][]float64) *Scenario {
	s := &Scenario{Name: "synthetic"}
	for name, ms := range values {
		v := &Variant{Name: name, Valid: true}
		n := 0
		for _, xs := range ms {
			n = max(n, len(xs))
		}
		for i := range n {
			rp := Repeat{Extra: map[string]float64{}}
			for m, xs := range ms {
				setMetric(&rp, m, xs[min(i, len(xs)-1)])
			}
			v.Repeats = append(v.Repeats, rp)
		}
		s.Variants = append(s.Variants, v)
	}
	return s
}

// jitter multiplies xs by a fixed pattern of small deviations, so that a
// comparison has a spread (a t interval of identical ratios has width 0).
func jitter(x float64, n int) []float64 {
	pattern := []float64{1, 1.02, 0.98, 1.01, 0.99, 1.03, 0.97, 1, 1.02, 0.98}
	var out []float64
	for i := range n {
		out = append(out, x*pattern[i%len(pattern)])
	}
	return out
}

func TestThreeWayVerdictsAgainstTheBestAlternative(t *testing.T) {
	cases := []struct {
		name string
		cw   float64 // cpuwork's value; a = 1, b = 2
		want Verdict
	}{
		{"half the best alternative: better", 0.5, Better},
		{"the same: equivalent", 1, Equivalent},
		{"twice the best alternative: worse", 2, Worse},
		{"3 % faster, inside the 5 % margin: equivalent", 0.97, Equivalent},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := synth(map[string]map[string][]float64{
				"cw": {"p99": jitter(tc.cw, 6)[1:]}, "a": {"p99": jitter(1, 6)[1:]}, "b": {"p99": jitter(2, 6)},
				"a-aa": {"p99": jitter(1, 6)[1:]},
			})
			judgeChecks(s, []check{{label: "p99", judged: "cw", against: []string{"a", "b"}, metric: "p99", aa: [2]string{"a", "a-aa"}}})
			c := s.Checks[0]
			if c.Verdict != tc.want || c.BestAlternative != "a" || c.Pairs != 5 {
				t.Fatalf("%s against %s on %d pairs, want %s against a on 5 (the shortest variant's repeats): %s", c.Verdict, c.BestAlternative, c.Pairs, tc.want, c.line())
			}
			if !(c.CILow <= c.Estimate && c.Estimate <= c.CIHigh) || c.Margin < judge.MarginFloor {
				t.Errorf("estimate %v outside [%v, %v] or margin %v under the floor", c.Estimate, c.CILow, c.CIHigh, c.Margin)
			}
			for _, want := range []string{string(tc.want), "95% CI", "margin", "5 pairs", " a "} {
				if !strings.Contains(c.line(), want) {
					t.Errorf("line %q lacks %q", c.line(), want)
				}
			}
		})
	}
}

func TestAnInconclusiveComparisonNeedsMorePairs(t *testing.T) {
	// 10 % better with a 10 % spread: after 3 pairs the interval still
	// reaches past 1; after 10 it does not.
	noisy := []float64{0.8, 1.0, 0.9, 0.85, 0.95, 0.9, 0.82, 0.98, 0.88, 0.92}
	for _, tc := range []struct {
		n    int
		want Verdict
	}{{3, Inconclusive}, {10, Better}} {
		s := synth(map[string]map[string][]float64{"cw": {"p99": noisy[:tc.n]}, "a": {"p99": jitter(1, tc.n)}, "a-aa": {"p99": jitter(1, tc.n)}})
		judgeChecks(s, []check{{label: "p99", judged: "cw", against: []string{"a"}, metric: "p99", aa: [2]string{"a", "a-aa"}}})
		if got := s.Checks[0].Verdict; got != tc.want {
			t.Errorf("%d pairs: %s, want %s: %s", tc.n, got, tc.want, s.Checks[0].line())
		}
	}
}

func TestTheAAControlSetsTheMargin(t *testing.T) {
	// cpuwork 10 % faster in every pair; the A/A control shows the same
	// arm 20 % slower against itself: a bias the run cannot tell from an
	// effect, so not judged (it once widened the margin to 20 % and read
	// a real 10 % difference equivalent).
	s := synth(map[string]map[string][]float64{"cw": {"p99": jitter(0.9, 6)}, "a": {"p99": jitter(1, 6)}, "a-aa": {"p99": jitter(1.2, 6)}})
	judgeChecks(s, []check{{label: "p99", judged: "cw", against: []string{"a"}, metric: "p99", aa: [2]string{"a", "a-aa"}}})
	c := s.Checks[0]
	if c.Verdict != "" || !strings.Contains(c.NotJudged, "unstable control") {
		t.Errorf("verdict %s: want not judged (unstable control): %s", c.Verdict, c.line())
	}
	// A control 3 % off, its interval inside the floor: the margin is
	// the floor and cpuwork's 10 % is better.
	s = synth(map[string]map[string][]float64{"cw": {"p99": jitter(0.9, 6)}, "a": {"p99": jitter(1, 6)}, "a-aa": {"p99": jitter(1.03, 6)}})
	judgeChecks(s, []check{{label: "p99", judged: "cw", against: []string{"a"}, metric: "p99", aa: [2]string{"a", "a-aa"}}})
	if c := s.Checks[0]; math.Abs(c.Margin-judge.MarginFloor) > 0.01 || c.Verdict != Better {
		t.Errorf("a 3 %% control: margin %.3f, verdict %s: want the floor and better: %s", c.Margin, c.Verdict, c.line())
	}
	// Without an A/A control the margin is the floor, and a note says so.
	s = synth(map[string]map[string][]float64{"cw": {"p99": jitter(0.9, 6)}, "a": {"p99": jitter(1, 6)}})
	judgeChecks(s, []check{{label: "p99", judged: "cw", against: []string{"a"}, metric: "p99"}})
	if c := s.Checks[0]; c.Margin != judge.MarginFloor || c.Verdict != Better || !strings.Contains(strings.Join(c.Notes, " "), "no A/A control") {
		t.Errorf("no A/A: margin %v verdict %s notes %q", c.Margin, c.Verdict, c.Notes)
	}
}

// Three pairs that agree closely by chance make no verdict the run's own
// noise does not support: the interval takes the spread pooled with the
// A/A control's when that is wider. The case is seed 2815's timers
// beside a nice-0 loop (docs/raw/bench-default-seed2815.json): cpuwork's
// batch jobs/s 0.935x, 0.938x and 0.930x the yielding pool's, called
// worse at [0.92-0.95], while the pool against itself gave 0.937x, 0.993x
// and 0.987x; at 12 pairs it was 0.98x [0.93-1.04], inconclusive
// (docs/raw/timers-12pairs-seed2816.txt). A comparison noisier than its
// control keeps its own interval.
func TestThreePairsAgreeingByChanceMakeNoVerdictTheControlsNoiseDenies(t *testing.T) {
	s := synth(map[string]map[string][]float64{
		"cw":   {"batch_jobs_per_s": {1191, 1238, 1279}},
		"a":    {"batch_jobs_per_s": {1274, 1320, 1376}},
		"a-aa": {"batch_jobs_per_s": {1194, 1311, 1358}},
	})
	s.level = lookLevel(defaultMaxPairs)
	judgeChecks(s, []check{{label: "jobs", judged: "cw", against: []string{"a"}, metric: "batch_jobs_per_s", higher: true, aa: [2]string{"a", "a-aa"}}})
	c := s.Checks[0]
	if c.Verdict != Inconclusive || !strings.Contains(strings.Join(c.Notes, " "), "A/A control's per-pair spread") {
		t.Errorf("3 pairs at 0.93-0.94x beside an A/A control of 0.94-0.99x: %s, notes %q; want inconclusive, at the control's spread", c.line(), c.Notes)
	}
	_, lo, hi := judge.PairedInterval([]float64{1191.0 / 1274, 1238.0 / 1320, 1279.0 / 1376}, s.level)
	if !(c.CILow < lo && c.CIHigh > hi) {
		t.Errorf("interval [%.3f, %.3f], want wider than the pairs' own [%.3f, %.3f]", c.CILow, c.CIHigh, lo, hi)
	}
	// The control of another variant than the best alternative says
	// nothing of this comparison's noise (seed 2815's quota at 0.25 CPUs:
	// cpuwork against GOMAXPROCS 1, the control Go's default, throttled).
	s = synth(map[string]map[string][]float64{
		"cw":   {"p99": {1.006, 1.014, 0.995}},
		"a":    {"p99": {1, 1, 1}},
		"b":    {"p99": {3, 1, 4}},
		"b-aa": {"p99": {1, 2.5, 2}},
	})
	s.level = lookLevel(defaultMaxPairs)
	judgeChecks(s, []check{{label: "p99", judged: "cw", against: []string{"a", "b"}, metric: "p99", aa: [2]string{"b", "b-aa"}}})
	if c := s.Checks[0]; c.Verdict != Equivalent || strings.Contains(strings.Join(c.Notes, " "), "A/A control's per-pair spread") {
		t.Errorf("against a, with b's A/A control: %s, notes %q; want equivalent on its own interval", c.line(), c.Notes)
	}
	// A noisy comparison beside a quiet control: its own interval, not
	// narrowed by pooling.
	noisy := []float64{0.5, 0.9, 0.6}
	s = synth(map[string]map[string][]float64{"cw": {"p99": noisy}, "a": {"p99": {1, 1, 1}}, "a-aa": {"p99": {1, 1.01, 0.99}}})
	s.level = lookLevel(defaultMaxPairs)
	judgeChecks(s, []check{{label: "p99", judged: "cw", against: []string{"a"}, metric: "p99", aa: [2]string{"a", "a-aa"}}})
	_, lo, hi = judge.PairedInterval(noisy, s.level)
	if c := s.Checks[0]; math.Abs(c.CILow-lo) > 1e-12 || math.Abs(c.CIHigh-hi) > 1e-12 || strings.Contains(strings.Join(c.Notes, " "), "A/A control's per-pair spread") {
		t.Errorf("a comparison noisier than its control: [%v, %v], want its own [%v, %v]; notes %q", c.CILow, c.CIHigh, lo, hi, c.Notes)
	}
}

func TestHigherIsBetterMirrorsTheVerdict(t *testing.T) {
	s := synth(map[string]map[string][]float64{"cw": {"goodput_per_s": jitter(200, 5)}, "a": {"goodput_per_s": jitter(100, 5)}, "b": {"goodput_per_s": jitter(50, 5)}})
	judgeChecks(s, []check{{label: "goodput", judged: "cw", against: []string{"a", "b"}, metric: "goodput_per_s", higher: true}})
	if c := s.Checks[0]; c.Verdict != Better || c.BestAlternative != "a" {
		t.Errorf("%s against %s, want better against a (the highest)", c.Verdict, c.BestAlternative)
	}
}

// Goals are figures: a value far past its goal changes no verdict.
func TestGoalsAreFiguresNeverVerdicts(t *testing.T) {
	s := synth(map[string]map[string][]float64{
		"cw":       {"p99": jitter(0.004, 3), "shed_share": {0.5, 0.5, 0.5}},
		"a":        {"p99": jitter(0.010, 3)},
		"no-batch": {"p99": jitter(0.003, 3)},
	})
	judgeChecks(s, []check{
		{label: "alone: p99", judged: "cw", against: []string{"a"}, metric: "p99"},
		{label: "alone: p99 (goal)", judged: "cw", metric: "p99", limit: 0.001, floor: "no-batch"},
		{label: "alone: shed", judged: "cw", metric: "shed_share", limit: 0.01},
	})
	if s.Status != StatusBetter || s.Summary != "better" {
		t.Fatalf("status %s %q: want better (goals missed by 4x and 50x are not verdicts)", s.Status, s.Summary)
	}
	f := s.Checks[1]
	if f.Kind != "figure" || f.Verdict != "" || f.FloorName != "no-batch" || math.Abs(f.Floor-0.003) > 1e-9 {
		t.Errorf("figure %+v: want no verdict and the floor 3 ms", f)
	}
	if !strings.Contains(f.line(), "goal <= 1.00ms") || !strings.Contains(f.line(), "floor: no-batch 3.00ms") {
		t.Errorf("figure line %q", f.line())
	}
}

// The status says per case what was found, worst first.
func TestTheStatusSaysWhatEachCaseFound(t *testing.T) {
	s := synth(map[string]map[string][]float64{
		"cw": {"p99": jitter(0.5, 4)}, "a": {"p99": jitter(1, 4)},
		"cw2": {"p99": jitter(2, 4)}, "cw3": {"p99": jitter(0.5, 4)},
	})
	judgeChecks(s, []check{
		{label: "alone: p99", judged: "cw", against: []string{"a"}, metric: "p99"},
		{label: "95%: p99", judged: "cw2", against: []string{"a"}, metric: "p99"},
		{label: "nice0: p99", judged: "cw3", against: []string{"a"}, metric: "p99"},
	})
	if s.Status != StatusWorse || s.Summary != "worse at 95%, better alone, nice0" {
		t.Errorf("status %s %q", s.Status, s.Summary)
	}
	s = synth(map[string]map[string][]float64{"cw": {"p99": jitter(0.5, 4)}, "a": {"p99": jitter(1, 4)}})
	judgeChecks(s, []check{{label: "alone: p99", judged: "cw", against: []string{"a"}, metric: "p99"}, {label: "nice0: p99", judged: "cw", against: []string{"a"}, metric: "p99"}})
	if s.Summary != "better in 2 of 2 cases" {
		t.Errorf("summary %q", s.Summary)
	}
}

// Each check is judged on its own pairs: a repeat left out of one check
// (no value of its metric) stays in the others.
func TestChecksAreJudgedOnTheirOwnPairs(t *testing.T) {
	s := synth(map[string]map[string][]float64{"cw": {"p99": jitter(0.5, 4), "share": {0.9, 0.9, 0.9, 0.9}}, "a": {"p99": jitter(1, 4), "share": {0.9, 0.9, 0.9, 0.9}}})
	delete(s.variant("cw").Repeats[1].Extra, "share")
	judgeChecks(s, []check{
		{label: "p99", judged: "cw", against: []string{"a"}, metric: "p99"},
		{label: "share", judged: "cw", against: []string{"a"}, metric: "share", higher: true},
	})
	if s.Checks[0].Pairs != 4 || s.Checks[1].Pairs != 3 {
		t.Errorf("pairs %d and %d, want 4 and 3", s.Checks[0].Pairs, s.Checks[1].Pairs)
	}
}

// A comparison decided at a look keeps the pairs it was decided on.
func TestADecidedComparisonKeepsItsPairs(t *testing.T) {
	s := synth(map[string]map[string][]float64{"cw": {"p99": append(jitter(0.5, 3), 3, 3, 3)}, "a": {"p99": jitter(1, 6)}})
	s.decidedAt = map[string]int{"p99": 3}
	judgeChecks(s, []check{{label: "p99", judged: "cw", against: []string{"a"}, metric: "p99"}})
	if c := s.Checks[0]; c.Pairs != 3 || c.Verdict != Better {
		t.Errorf("%s on %d pairs, want better on the 3 it was decided on", c.Verdict, c.Pairs)
	}
}

func TestAQuickRunPrintsNoVerdict(t *testing.T) {
	s := synth(map[string]map[string][]float64{"cw": {"p99": {0.5}}, "a": {"p99": {1}}})
	s.smoke = true
	judgeChecks(s, []check{{label: "p99", judged: "cw", against: []string{"a"}, metric: "p99"}})
	if s.Status != StatusSmoke || s.Checks[0].Verdict != "" || !strings.Contains(s.Checks[0].line(), "no verdict") {
		t.Errorf("status %s, check %q", s.Status, s.Checks[0].line())
	}
}

func TestVerdictNotJudgedNeverDropped(t *testing.T) {
	base := func() *Scenario {
		return synth(map[string]map[string][]float64{"cw": {"p99": {1, 1}}, "a": {"p99": {2, 2}}, "b": {"p99": {3, 3}}})
	}
	c := []check{{label: "p99", judged: "cw", against: []string{"a", "b"}, metric: "p99"}}
	s := base()
	s.variant("b").Valid, s.variant("b").Invalid = false, "synthetic"
	judgeChecks(s, c)
	if s.Status != StatusNotJudged || !strings.Contains(s.Verdict, "b invalid") {
		t.Errorf("an invalid alternative: %s %q", s.Status, s.Verdict)
	}
	s = base()
	s.variant("a").Repeats[1].P99 = math.Inf(1)
	judgeChecks(s, c)
	if s.Status != StatusNotJudged || !strings.Contains(s.Verdict, "not a measurement") {
		t.Errorf("an infinite value: %s %q", s.Status, s.Verdict)
	}
	// An alternative this run left out (--thorough's extras) is noted,
	// not a reason to judge nothing.
	s = base()
	s.Variants = s.Variants[:0:0]
	s = synth(map[string]map[string][]float64{"cw": {"p99": jitter(1, 3)}, "a": {"p99": jitter(2, 3)}})
	judgeChecks(s, c)
	if s.Checks[0].NotJudged != "" || !strings.Contains(strings.Join(s.Checks[0].Notes, " "), "not run here: b") {
		t.Errorf("a left-out alternative: %q %q", s.Checks[0].NotJudged, s.Checks[0].Notes)
	}
}

// TestEveryScenarioDeclaresComparisonsThatCanComeOutEveryWay feeds each
// scenario's declared checks synthetic results: the judged variant at
// half, the same as, and twice its alternatives gives better, equivalent
// and worse; each variant a comparison needs made invalid, not judged
// naming it.
func TestEveryScenarioDeclaresComparisonsThatCanComeOutEveryWay(t *testing.T) {
	decls := map[string][]check{
		"burst":     burstChecks(),
		"priority":  priorityChecks(Competitions),
		"timers":    timerChecks(Competitions),
		"quota":     quotaChecks([]float64{0.25, 1.25, 1.5}),
		"neighbour": neighbourChecks(),
		"service":   serviceChecks([]float64{0.5, 0.8, 2}, 0.1),
	}
	for _, c := range inferenceChecks([]float64{0.5, 0.8, 0.95, 2}, 0.1, true, quotaCase{quota: 1.5, load: 2}) {
		if c.of == nil || c.metric == capacityMetric {
			decls["inference"] = append(decls["inference"], c)
		}
	}
	for name, cs := range decls {
		t.Run(name, func(t *testing.T) {
			n := 0
			for _, c := range cs {
				if c.figure() {
					continue
				}
				n++
				if c.aa[0] == "" && !strings.Contains(c.label, "cgroup") {
					t.Errorf("%s: no A/A control", c.label)
				}
				for factor, want := range map[float64]Verdict{0.5: Better, 1: Equivalent, 2: Worse} {
					if c.higher {
						factor = 1 / factor
					}
					vals := map[string]map[string][]float64{c.judged: {c.metric: jitter(factor, 4)}}
					for _, a := range c.against {
						vals[a] = map[string][]float64{c.metric: jitter(1, 4)}
					}
					s := synth(vals)
					judgeChecks(s, []check{c})
					if got := s.Checks[0].Verdict; got != want {
						t.Errorf("%s at %vx: %s, want %s: %s", c.label, factor, got, want, s.Checks[0].line())
					}
				}
				for _, need := range append([]string{c.judged}, c.against...) {
					vals := map[string]map[string][]float64{c.judged: {c.metric: jitter(1, 3)}}
					for _, a := range c.against {
						vals[a] = map[string][]float64{c.metric: jitter(1, 3)}
					}
					s := synth(vals)
					s.variant(need).Valid, s.variant(need).Invalid = false, "synthetic"
					judgeChecks(s, []check{c})
					if s.Status != StatusNotJudged || !strings.Contains(s.Verdict, need+" invalid") {
						t.Errorf("%s with %s invalid: %q: %s", c.label, need, s.Status, s.Verdict)
					}
				}
			}
			if n == 0 {
				t.Fatal("no comparison declared")
			}
		})
	}
}

func setMetric(rp *Repeat, m string, x float64) {
	switch m {
	case "p99":
		rp.P99 = x
	case "mean":
		rp.Mean = x
	case "p90":
		rp.P90 = x
	case "p50":
		rp.P50 = x
	default:
		rp.Extra[m] = x
	}
}

// A capacity that is a bound supports a verdict one way only: cpuwork that
// met the objective at every level has at least the capacity measured, so
// it can be better than the pool but never worse or equivalent on that
// evidence.
func TestABoundSupportsAVerdictOneWayOnly(t *testing.T) {
	mk := func(cw float64) *Scenario {
		return synth(map[string]map[string][]float64{
			// cw met the objective at every step: its capacity is a lower bound.
			"cpuwork@80%": {capacityMetric: jitter(cw, 3), capacityBoundKey: {1}},
			"pool@80%":    {capacityMetric: jitter(100, 3)},
		})
	}
	c := capacityCheck("", "", 0.1, []string{"pool"}, "pool")
	s := mk(60) // the bound is below the pool's capacity
	judgeChecks(s, []check{c})
	if r := s.Checks[0]; r.Verdict != Inconclusive || !strings.Contains(strings.Join(r.Notes, " "), "not supported") {
		t.Errorf("a lower bound below the pool: %s %v, want inconclusive with a note", r.Verdict, r.Notes)
	}
	s = mk(100) // equal: equivalence is not supported by a bound either
	judgeChecks(s, []check{c})
	if r := s.Checks[0]; r.Verdict != Inconclusive {
		t.Errorf("a lower bound equal to the pool: %s, want inconclusive", r.Verdict)
	}
	s = mk(180) // the bound alone beats the pool
	judgeChecks(s, []check{c})
	if r := s.Checks[0]; r.Verdict != Better {
		t.Errorf("a lower bound above the pool: %s, want better", r.Verdict)
	}
}

// A p99 of all requests with over 1 % unanswered is its slowest answer, a
// lower bound: a variant that sheds three quarters of its requests must not
// read better than one that sheds a fifth for its lower slowest answer, and
// a peer that sheds may still lose to one that answers.
func TestSheddingMoreNeverReadsAsALowerP99OfAll(t *testing.T) {
	mk := func(cwP99, cwUnanswered, altUnanswered float64) *Scenario {
		return synth(map[string]map[string][]float64{
			"cpuwork@80%": {"p99_all_s": jitter(cwP99, 4), "unanswered_share": {cwUnanswered}},
			"sem@80%":     {"p99_all_s": jitter(0.2, 4), "unanswered_share": {altUnanswered}},
		})
	}
	c := check{label: "80%: p99 of all", judged: "cpuwork@80%", against: []string{"sem@80%"}, metric: "p99_all_s"}
	s := mk(0.1, 0.75, 0.2) // both shed; cpuwork's slowest answer is lower
	judgeChecks(s, []check{c})
	if r := s.Checks[0]; r.Verdict != Inconclusive || !strings.Contains(strings.Join(r.Notes, " "), "not supported") {
		t.Errorf("both over 1 %% unanswered: %s %v, want inconclusive with a note", r.Verdict, r.Notes)
	}
	s = mk(0.1, 0, 0.2) // only the peer sheds: cpuwork's p99 is exact
	judgeChecks(s, []check{c})
	if r := s.Checks[0]; r.Verdict != Better {
		t.Errorf("only the peer over 1 %% unanswered: %s %v, want better", r.Verdict, r.Notes)
	}
	s = mk(0.4, 0.1, 0) // cpuwork sheds and is slower: worse stands
	judgeChecks(s, []check{c})
	if r := s.Checks[0]; r.Verdict != Worse {
		t.Errorf("cpuwork over 1 %% unanswered and slower: %s %v, want worse", r.Verdict, r.Notes)
	}
}

// A run of a fixed number of pairs (--repeat) looks once, at the end:
// its intervals are at 95 %, not at the per-look level of looks it never
// takes (24 pairs were charged for four looks: 98.2 %). A run that looks
// at 3, 6 and 12 pairs computes each look at Pocock's 97.8 % and says so.
func TestTheLevelPrintedIsTheLevelUsed(t *testing.T) {
	for _, c := range []struct {
		rounds, max int
		level       float64
		words       string
	}{
		{24, 24, 0.95, "each interval at 95 %, looked at once"},
		{48, 48, 0.95, "each interval at 95 %, looked at once"},
		{3, 12, 1 - 0.0221, "each look's interval at 97.8 % (95 % over the 3 looks together: Pocock;"},
		{3, 24, 1 - 0.0182, "each look's interval at 98.2 % (95 % over the 4 looks together: Pocock;"},
	} {
		r := &Runner{rounds: c.rounds, maxRounds: c.max}
		if got := r.lookLevel(); math.Abs(got-c.level) > 1e-9 {
			t.Errorf("%d to %d pairs: level %.4f, want %.4f", c.rounds, c.max, got, c.level)
		}
		if !strings.Contains(r.pairsRule(), c.words) {
			t.Errorf("%d to %d pairs: %q, want it to say %q", c.rounds, c.max, r.pairsRule(), c.words)
		}
	}
}

// An A/A control that is biased (identical arms 1.2x apart) or drifts
// across the run makes its comparisons "not judged: unstable control":
// before, its bias became the margin, and a real 10 % difference read
// equivalent. A steady control judges as before.
func TestAnUnstableControlMakesItsComparisonsNotJudged(t *testing.T) {
	c := check{label: "alone: p99", judged: "cpuwork", against: []string{"pool"}, metric: "p99", aa: [2]string{"pool", "pool-aa"}}
	drift := make([]float64, 12)
	for i := range drift {
		drift[i] = 100 * (0.84 + 0.03*float64(i)) * []float64{1, 1.01, 0.99}[i%3] // about 1 on average
	}
	for _, tc := range []struct {
		name string
		aa   []float64
		want Verdict
		why  string
	}{
		{"biased 1.2x", jitter(120, 12), "", "unstable control"},
		{"drifting 3 % a pair", drift, "", "drifts"},
		{"steady", jitter(100, 12), Worse, ""},
	} {
		s := synth(map[string]map[string][]float64{
			"cpuwork": {"p99": jitter(110, 12)},
			"pool":    {"p99": jitter(100, 12)},
			"pool-aa": {"p99": tc.aa},
		})
		judgeChecks(s, []check{c})
		got := s.Checks[0]
		if got.Verdict != tc.want || !strings.Contains(got.NotJudged, tc.why) {
			t.Errorf("%s: verdict %q, not judged %q; want %q and %q: %s", tc.name, got.Verdict, got.NotJudged, tc.want, tc.why, got.line())
		}
	}
}

// An inconclusive comparison says how many pairs would decide it at its
// run's spread, and the output gives the minutes and the command; a
// decided one says nothing, and one whose estimate sits on the margin's
// edge says it cannot be decided here.
func TestAnUndecidedComparisonSaysWhatDecidingWouldTake(t *testing.T) {
	noisy := []float64{0.8, 1.0, 0.9} // about 0.9x, a spread of 0.11 in logs
	mk := func(cw []float64) *Scenario {
		s := synth(map[string]map[string][]float64{"cw": {"p99": cw}, "a": {"p99": {1, 1, 1}}})
		s.Name, s.Pairs, s.DurationS = "service", 3, 180
		judgeChecks(s, []check{{label: "p99", judged: "cw", against: []string{"a"}, metric: "p99"}})
		return s
	}
	s := mk(noisy)
	c := s.Checks[0]
	// At 0.9x the estimate is 0.054 in logs from the 5 % band's edge
	// (0.049): (1.96 x 0.11 / 0.056)^2 is about 15 pairs.
	if c.Verdict != Inconclusive || c.PairsToDecide < 10 || c.PairsToDecide > 25 {
		t.Fatalf("%s, %d pairs to decide; want inconclusive and 10-25", c.Verdict, c.PairsToDecide)
	}
	var b strings.Builder
	WriteScenario(&b, s)
	want := fmt.Sprintf("cannot tell here in this run: about %d pairs / %d min at this run's spread: cpuwork bench --scenario service --repeat %d",
		c.PairsToDecide, c.PairsToDecide, c.PairsToDecide)
	if !strings.Contains(b.String(), want) {
		t.Errorf("output lacks %q:\n%s", want, b.String())
	}
	if n := pairsToDecide([]float64{0.9, 0.91, 0.89}, nil, 1, 0.05); n <= 3 {
		t.Errorf("a tight 0.9x over 3 pairs: %d pairs to decide, want more than the 3 it has", n)
	}
	if c := mk(jitter(0.5, 3)).Checks[0]; c.Verdict != Better || c.PairsToDecide != 0 {
		t.Errorf("a decided comparison: %s, %d pairs to decide; want better and 0", c.Verdict, c.PairsToDecide)
	}
	edge := math.Exp(-math.Log(1.05))
	if c := mk([]float64{edge * 0.9, edge, edge / 0.9}).Checks[0]; c.PairsToDecide != maxPairsToDecide {
		t.Errorf("an estimate on the margin's edge: %d pairs to decide, want %d (cannot be decided here)", c.PairsToDecide, maxPairsToDecide)
	}
}

// The summary line of an inconclusive scenario says how long deciding it
// would take here: its comparison nearest to a decision, with the pairs
// and minutes; a decided scenario's line says nothing more.
func TestTheSummarySaysHowLongDecidingWouldTake(t *testing.T) {
	s := synth(map[string]map[string][]float64{"cw": {"p99": {0.8, 1.0, 0.9}}, "a": {"p99": {1, 1, 1}}})
	s.Name, s.Pairs, s.DurationS = "service", 3, 180
	judgeChecks(s, []check{{label: "80%: p99", judged: "cw", against: []string{"a"}, metric: "p99"}})
	n := s.Checks[0].PairsToDecide
	want := fmt.Sprintf(`cannot tell in this run; about %d pairs (%d min here) would decide "80%%: p99"`, n, n)
	if got := nearestDecision(s); got != want {
		t.Errorf("nearest decision %q, want %q", got, want)
	}
	var b strings.Builder
	writeSummary(&b, &Report{Scenarios: []*Scenario{s}})
	if !strings.Contains(b.String(), want) {
		t.Errorf("summary lacks %q:\n%s", want, b.String())
	}
	d := synth(map[string]map[string][]float64{"cw": {"p99": jitter(0.5, 3)}, "a": {"p99": {1, 1, 1}}})
	d.Pairs, d.DurationS = 3, 180
	judgeChecks(d, []check{{label: "p99", judged: "cw", against: []string{"a"}, metric: "p99"}})
	if got := nearestDecision(d); got != "" {
		t.Errorf("a decided scenario: %q, want nothing", got)
	}
}

// A control biased at 95 % — the level its margin is computed at — is
// not judged at a look whose own, wider level would let it pass (it once
// judged README's inference goodput with a ±28 % margin); the line
// prints the level its interval was computed at, and a control of fewer
// than 3 pairs is said to be too few.
func TestAControlBiasedAt95IsNotJudgedAtAWiderLookAndLinesSayTheirLevel(t *testing.T) {
	c := check{label: "2x: goodput", judged: "cpuwork", against: []string{"pool"}, metric: "goodput", higher: true, aa: [2]string{"pool", "pool-aa"}}
	aa := []float64{43.2, 52.7, 64.4} // pool-aa / pool: 0.53x [0.32-0.86] at 95 %
	s := synth(map[string]map[string][]float64{
		"cpuwork": {"goodput": {300, 290, 310}},
		"pool":    {"goodput": {100, 100, 100}},
		"pool-aa": {"goodput": aa},
	})
	s.level = lookLevel(defaultMaxPairs)
	if judge.UnstableControl([]float64{0.432, 0.527, 0.644}, s.level) != "" {
		t.Fatal("the control is unstable at the look's level too: the test no longer tests the 95 % rule")
	}
	judgeChecks(s, []check{c})
	if got := s.Checks[0]; got.Verdict != "" || !strings.Contains(got.NotJudged, "at 95 %") {
		t.Errorf("a control 0.53x at 95 %%: verdict %q, not judged %q", got.Verdict, got.NotJudged)
	}
	s = synth(map[string]map[string][]float64{
		"cpuwork": {"goodput": jitter(300, 3)},
		"pool":    {"goodput": jitter(100, 3)},
		"pool-aa": {"goodput": jitter(100, 2)[:2]},
	})
	s.level = lookLevel(defaultMaxPairs)
	judgeChecks(s, []check{c})
	line := s.Checks[0].line()
	if want := levelText(lookLevel(defaultMaxPairs)) + " CI"; !strings.Contains(line, want) || strings.Contains(line, "95% CI") {
		t.Errorf("the line does not print its look's level %q: %s", want, line)
	}
	if !strings.Contains(line, "too few") {
		t.Errorf("a control of 2 pairs is not flagged: %s", line)
	}
}

// A comparison whose judged side did nothing in a pair where the best
// alternative did work is a loss, said as one — worse on the totals, with
// both figures — never "not judged" for want of a ratio; a zero that the
// other pairs outweigh is inconclusive, still said.
func TestAZeroOnTheJudgedSideIsALoss(t *testing.T) {
	c := check{label: "2x: batch work", judged: "cpuwork", against: []string{"sem"}, metric: "batch_cpu_per_s", higher: true}
	for _, tc := range []struct {
		name   string
		judged []float64
		want   Verdict
	}{
		{"none in every pair", []float64{0, 0, 0}, Worse},
		{"none in one pair, less in all", []float64{0, 0.4, 0.5}, Worse},
		{"none in one pair, far more in the others", []float64{0, 2, 2}, Inconclusive},
	} {
		s := synth(map[string]map[string][]float64{
			"cpuwork": {"batch_cpu_per_s": tc.judged},
			"sem":     {"batch_cpu_per_s": {0.9, 1.0, 1.1}},
		})
		judgeChecks(s, []check{c})
		got := s.Checks[0]
		if got.Verdict != tc.want || got.NotJudged != "" || !strings.Contains(got.line(), "did none in pair 1") {
			t.Errorf("%s: verdict %q, not judged %q: %s", tc.name, got.Verdict, got.NotJudged, got.line())
		}
	}
}

// With zeros on the alternatives' side too, the one with the largest
// total is the comparator (a geometric mean with a zero is 0).
func TestAZeroLossIsJudgedAgainstTheLargestTotal(t *testing.T) {
	c := check{label: "2x: batch work", judged: "cpuwork", against: []string{"stock", "sem"}, metric: "batch_cpu_per_s", higher: true}
	s := synth(map[string]map[string][]float64{
		"cpuwork": {"batch_cpu_per_s": {0, 0, 0}},
		"stock":   {"batch_cpu_per_s": {0, 0.1, 0}},
		"sem":     {"batch_cpu_per_s": {0, 1, 1}},
	})
	judgeChecks(s, []check{c})
	if got := s.Checks[0]; got.Verdict != Worse || got.BestAlternative != "sem" || !strings.Contains(got.line(), "did none in pair 2, 3 of 3") {
		t.Errorf("verdict %q against %q: %s", got.Verdict, got.BestAlternative, got.line())
	}
}
