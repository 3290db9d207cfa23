package bench

import (
	"fmt"
	"math"
	"slices"
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

func TestVerdictAgainstTheBestAlternativePerPairedRepeat(t *testing.T) {
	c := []check{{label: "p99", judged: "cw", against: []string{"a", "b"}, metric: "p99", limit: 1.0}}
	cases := []struct {
		name   string
		cw     []float64
		a, b   []float64
		want   Status
		k      int
		values []float64
	}{
		{"beats the best alternative in every repeat", []float64{1, 1, 1}, []float64{2, 2, 2}, []float64{3, 1.5, 4}, StatusHolds, 3, []float64{0.5, 1 / 1.5, 0.5}},
		{"exactly at the limit holds", []float64{2, 2, 2}, []float64{2, 2, 2}, []float64{3, 3, 3}, StatusHolds, 3, []float64{1, 1, 1}},
		{"beats the weak baseline but not the best: does not hold", []float64{2, 2, 2}, []float64{10, 10, 10}, []float64{1, 1, 1}, StatusFails, 0, []float64{2, 2, 2}},
		{"one repeat across the limit: mixed", []float64{1, 1, 1.01}, []float64{1, 1, 1}, []float64{5, 5, 5}, StatusMixed, 2, []float64{1, 1, 1.01}},
		// The medians would say holds (cw 1 vs best 1.5); paired, only
		// 1 of 3 repeats passes.
		{"medians of unpaired repeats would flatter: mixed", []float64{1, 3, 3}, []float64{1.5, 1.5, 2}, []float64{9, 9, 9}, StatusMixed, 1, []float64{1 / 1.5, 2, 1.5}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := synth(map[string]map[string][]float64{"cw": {"p99": tc.cw}, "a": {"p99": tc.a}, "b": {"p99": tc.b}})
			judge(s, c)
			if s.Status != tc.want || s.Agree != tc.k || s.Of != 3 {
				t.Fatalf("status %q %d/%d, want %q %d/3: %s", s.Status, s.Agree, s.Of, tc.want, tc.k, s.Verdict)
			}
			for i, x := range tc.values {
				if math.Abs(s.Checks[0].Values[i]-x) > 1e-9 {
					t.Errorf("repeat %d ratio %v, want %v", i, s.Checks[0].Values[i], x)
				}
			}
			if !strings.Contains(s.Summary, fmt.Sprintf("%d/3", tc.k)) || !strings.Contains(s.Verdict, "the best of a, b") {
				t.Errorf("summary %q verdict %q", s.Summary, s.Verdict)
			}
		})
	}
}

func TestVerdictARepeatPassesOnlyWhenEveryCheckPassesInIt(t *testing.T) {
	s := synth(map[string]map[string][]float64{
		"cw": {"p99": {1, 1, 1}, "share": {0.95, 0.5, 0.95}},
		"a":  {"p99": {2, 2, 2}},
	})
	judge(s, []check{
		{label: "p99", judged: "cw", against: []string{"a"}, metric: "p99", limit: 1},
		{label: "share", judged: "cw", metric: "share", higher: true, limit: 0.9},
	})
	// Check by check: 3/3 and 2/3; by repeat: repeat 2 fails one check.
	if s.Status != StatusMixed || s.Agree != 2 || s.Checks[0].Status != StatusHolds || s.Checks[1].Status != StatusMixed {
		t.Fatalf("%q %d/%d: %s", s.Status, s.Agree, s.Of, s.Verdict)
	}
}

func TestVerdictHigherIsBetterAndAbsoluteLimits(t *testing.T) {
	s := synth(map[string]map[string][]float64{
		"cw": {"goodput_per_s": {100, 99, 100}, "throttled_share": {0.05, 0.05, 0.0501}},
		"a":  {"goodput_per_s": {100, 100, 50}},
	})
	judge(s, []check{
		{label: "goodput", judged: "cw", against: []string{"a"}, metric: "goodput_per_s", higher: true, limit: 1.0},
		{label: "throttled", judged: "cw", metric: "throttled_share", limit: 0.05},
	})
	// Repeat 1: 1.0x and 5 % (both at the limit: pass); repeat 2: 0.99x
	// (fails); repeat 3: 2x but 5.01 % throttled (fails).
	if s.Status != StatusMixed || s.Agree != 1 {
		t.Fatalf("%q %d/%d: %s", s.Status, s.Agree, s.Of, s.Verdict)
	}
	if got := s.Checks[0].Best[2]; got != "a" {
		t.Errorf("best alternative %q", got)
	}
}

func TestVerdictNotJudgedNeverDropped(t *testing.T) {
	base := func() *Scenario {
		return synth(map[string]map[string][]float64{"cw": {"p99": {1, 1}}, "a": {"p99": {2, 2}}, "b": {"p99": {3, 3}}})
	}
	c := []check{{label: "p99", judged: "cw", against: []string{"a", "b"}, metric: "p99", limit: 1}}
	t.Run("an invalid alternative", func(t *testing.T) {
		s := base()
		s.variant("b").Valid, s.variant("b").Invalid = false, "achieved 50/s of 100/s offered"
		judge(s, c)
		if s.Status != StatusNotJudged || !strings.Contains(s.Verdict, "b invalid: achieved 50/s") {
			t.Errorf("%q: %s", s.Status, s.Verdict)
		}
	})
	t.Run("a missing variant", func(t *testing.T) {
		judge(base(), c)
		s := base()
		judge(s, []check{{label: "p99", judged: "cw", against: []string{"zzz"}, metric: "p99", limit: 1}})
		if s.Status != StatusNotJudged || !strings.Contains(s.Verdict, "zzz not measured") {
			t.Errorf("%q: %s", s.Status, s.Verdict)
		}
	})
	t.Run("an invalid judged variant", func(t *testing.T) {
		s := base()
		s.variant("cw").Valid = false
		judge(s, c)
		if s.Status != StatusNotJudged {
			t.Errorf("%q", s.Status)
		}
	})
	t.Run("unpaired repeats", func(t *testing.T) {
		s := synth(map[string]map[string][]float64{"cw": {"p99": {1, 1}}, "a": {"p99": {2, 2, 2}}})
		judge(s, []check{{label: "p99", judged: "cw", against: []string{"a"}, metric: "p99", limit: 1}})
		if s.Status != StatusNotJudged || !strings.Contains(s.Verdict, "not paired") {
			t.Errorf("%q: %s", s.Status, s.Verdict)
		}
	})
	t.Run("a metric that was not recorded", func(t *testing.T) {
		s := base()
		judge(s, []check{{label: "x", judged: "cw", metric: "nope", limit: 1}})
		if s.Status != StatusNotJudged || !strings.Contains(s.Verdict, "has no nope") {
			t.Errorf("%q: %s", s.Status, s.Verdict)
		}
	})
	t.Run("infinity and zero are not measurements", func(t *testing.T) {
		for _, bad := range []float64{math.Inf(1), math.NaN(), 0} {
			s := synth(map[string]map[string][]float64{"cw": {"p99": {1, 1}}, "a": {"p99": {bad, 2}}})
			judge(s, []check{{label: "p99", judged: "cw", against: []string{"a"}, metric: "p99", limit: 1}})
			if s.Status != StatusNotJudged {
				t.Errorf("comparator %v: %q: %s", bad, s.Status, s.Verdict)
			}
		}
	})
	t.Run("a failed calibration", func(t *testing.T) {
		s := base()
		s.Calibration = "the capacity run failed"
		judge(s, c)
		if s.Status != StatusNotJudged || !strings.Contains(s.Verdict, "calibration") {
			t.Errorf("%q: %s", s.Status, s.Verdict)
		}
	})
	t.Run("nothing declared", func(t *testing.T) {
		s := base()
		judge(s, nil)
		if s.Status != StatusNotJudged {
			t.Errorf("%q", s.Status)
		}
	})
	t.Run("a skipped scenario stays skipped", func(t *testing.T) {
		s := base()
		s.Skipped = "needs root"
		judge(s, c)
		if s.Status != StatusSkipped {
			t.Errorf("%q", s.Status)
		}
	})
}

// TestEveryScenarioDeclaresChecksThatCanHoldAndFail feeds each scenario's
// declared checks synthetic results: values exactly at every limit hold;
// one repeat across one check's limit makes the claim mixed; every repeat
// across it, does not hold; each variant a check needs made invalid, not
// judged naming it.
func TestEveryScenarioDeclaresChecksThatCanHoldAndFail(t *testing.T) {
	decls := map[string][]check{
		"burst":     burstChecks(),
		"priority":  priorityChecks(Competitions),
		"timers":    timerChecks(Competitions),
		"quota":     quotaChecks([]float64{0.25, 1.25, 1.5}),
		"neighbour": neighbourChecks(),
		"service":   serviceChecks(),
		"inference": inferenceChecks([]float64{0.5, 0.8, 0.95, 1.1}, 0.1, true, true)[:0], // filled below
	}
	var plain []check // inference without its interpolated capacity check (tested apart)
	for _, c := range inferenceChecks([]float64{0.5, 0.8, 0.95, 1.1}, 0.1, true, true) {
		if c.of == nil {
			plain = append(plain, c)
		}
	}
	decls["inference"] = plain
	const n = 3
	for name, cs := range decls {
		t.Run(name, func(t *testing.T) {
			if len(cs) == 0 {
				t.Fatal("no checks declared")
			}
			// Values at every limit: alternatives at 1 (or kept), the
			// judged variant at limit × the best alternative.
			vals := map[string]map[string][]float64{}
			set := func(v, m string, x float64) {
				if vals[v] == nil {
					vals[v] = map[string][]float64{}
				}
				vals[v][m] = []float64{x, x, x}
			}
			get := func(v, m string) (float64, bool) {
				if xs, ok := vals[v][m]; ok {
					return xs[0], true
				}
				return 0, false
			}
			// Absolute limits first, then ratios: a judged value set
			// before puts its unset alternatives at value / limit.
			ordered := slices.Clone(cs)
			slices.SortStableFunc(ordered, func(a, b check) int { return min(len(a.against), 1) - min(len(b.against), 1) })
			for _, c := range ordered {
				jv, jset := get(c.judged, c.metric)
				best, bestSet := 1.0, false
				for _, a := range c.against {
					x, ok := get(a, c.metric)
					if !ok {
						x = 1
						if jset {
							x = jv / c.limit
						}
						set(a, c.metric, x)
					}
					if !bestSet || (c.higher && x > best) || (!c.higher && x < best) {
						best, bestSet = x, true
					}
				}
				if jset {
					continue
				}
				set(c.judged, c.metric, c.limit*best)
			}
			s := synth(vals)
			judge(s, cs)
			if s.Status != StatusHolds || s.Agree != n {
				t.Fatalf("at every limit: %q %d/%d: %s", s.Status, s.Agree, s.Of, s.Verdict)
			}
			for _, c := range cs {
				across := func(repeats int) *Scenario {
					s := synth(vals)
					v := s.variant(c.judged)
					for i := range repeats {
						x, _ := metricOf(v.Repeats[i], c.metric)
						y := x * 1.01
						if c.higher {
							y = x * 0.99
						}
						if x == 0 { // a limit of 0 (none here) could not be crossed by scaling
							t.Fatalf("%s: limit 0", c.label)
						}
						setMetric(&v.Repeats[i], c.metric, y)
					}
					judge(s, cs)
					return s
				}
				if s := across(1); s.Status != StatusMixed || s.Agree != n-1 {
					t.Errorf("%s across its limit in one repeat: %q %d/%d", c.label, s.Status, s.Agree, s.Of)
				}
				if s := across(n); s.Status != StatusFails {
					t.Errorf("%s across its limit in every repeat: %q", c.label, s.Status)
				}
				for _, need := range append([]string{c.judged}, c.against...) {
					s := synth(vals)
					s.variant(need).Valid, s.variant(need).Invalid = false, "synthetic"
					judge(s, cs)
					if s.Status != StatusNotJudged || !strings.Contains(s.Verdict, need+" invalid") {
						t.Errorf("%s with %s invalid: %q: %s", c.label, need, s.Status, s.Verdict)
					}
				}
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
	default:
		rp.Extra[m] = x
	}
}

func TestCapacityAtTheTargetIsInterpolatedAndBoundedNeverInfinite(t *testing.T) {
	loads := []float64{0.5, 0.8, 0.95, 1.1}
	mk := func(p99s, goodputs map[string][]float64) *Scenario {
		vals := map[string]map[string][]float64{}
		for b, ps := range p99s {
			for k, l := range loads {
				vals[fmt.Sprintf("%s@%.0f%%", b, l*100)] = map[string][]float64{"p99": {ps[k]}, "goodput_per_s": {goodputs[b][k]}}
			}
		}
		return synth(vals)
	}
	gp := []float64{50, 80, 95, 100}
	var needs []string
	for _, b := range []string{"cw", "pool"} {
		for _, l := range loads {
			needs = append(needs, fmt.Sprintf("%s@%.0f%%", b, l*100))
		}
	}
	c := check{label: "capacity", judged: "cw", against: []string{"pool"}, metric: "goodput_per_s", higher: true, limit: 1, of: capacityAt("cw", loads, 0.1), needs: needs}
	t.Run("interpolated between the loads around the target", func(t *testing.T) {
		// cw: p99 0.05 at 80 %, 0.15 at 95 % → target 0.1 halfway: 87.5/s.
		s := mk(map[string][]float64{"cw": {0.01, 0.05, 0.15, 1}, "pool": {0.01, 0.2, 0.3, 1}}, map[string][]float64{"cw": gp, "pool": gp})
		judge(s, []check{c})
		r := s.Checks[0]
		if math.Abs(r.JudgedValues[0]-87.5) > 1e-9 {
			t.Errorf("cw capacity %v, want 87.5", r.JudgedValues[0])
		}
		// pool: 0.01 at 50 %, 0.2 at 80 % → 50 + (0.09/0.19)·30.
		if want := 50 + 0.09/0.19*30; math.Abs(r.BestValues[0]-want) > 1e-9 {
			t.Errorf("pool capacity %v, want %v", r.BestValues[0], want)
		}
		if s.Status != StatusHolds {
			t.Errorf("%q: %s", s.Status, s.Verdict)
		}
	})
	t.Run("a comparator that never meets the target is bounded above, not infinite", func(t *testing.T) {
		s := mk(map[string][]float64{"cw": {0.01, 0.05, 0.15, 1}, "pool": {1, 1, 1, 1}}, map[string][]float64{"cw": gp, "pool": gp})
		judge(s, []check{c})
		r := s.Checks[0]
		if r.BestValues[0] != 50 || math.IsInf(r.Values[0], 0) || !strings.Contains(strings.Join(r.Notes, " "), "upper bound") {
			t.Errorf("best %v ratio %v notes %v", r.BestValues, r.Values, r.Notes)
		}
	})
	t.Run("a judged variant that never meets it fails", func(t *testing.T) {
		s := mk(map[string][]float64{"cw": {1, 1, 1, 1}, "pool": {0.01, 0.05, 0.15, 1}}, map[string][]float64{"cw": gp, "pool": gp})
		judge(s, []check{c})
		if s.Status != StatusFails || s.Checks[0].JudgedValues[0] != 0 {
			t.Errorf("%q %v", s.Status, s.Checks[0].JudgedValues)
		}
	})
	t.Run("met at every load is a lower bound", func(t *testing.T) {
		s := mk(map[string][]float64{"cw": {0.01, 0.01, 0.01, 0.01}, "pool": {0.01, 0.05, 0.15, 1}}, map[string][]float64{"cw": gp, "pool": gp})
		judge(s, []check{c})
		if s.Checks[0].JudgedValues[0] != 100 || !strings.Contains(strings.Join(s.Checks[0].Notes, " "), "lower bound") {
			t.Errorf("%v %v", s.Checks[0].JudgedValues, s.Checks[0].Notes)
		}
	})
	t.Run("an invalid load level is not judged", func(t *testing.T) {
		s := mk(map[string][]float64{"cw": {0.01, 0.05, 0.15, 1}, "pool": {0.01, 0.2, 0.3, 1}}, map[string][]float64{"cw": gp, "pool": gp})
		s.variant("pool@95%").Valid = false
		judge(s, []check{c})
		if s.Status != StatusNotJudged {
			t.Errorf("%q", s.Status)
		}
	})
}

// A verdict that fails on a later check says which in its summary: the
// seed-71 run's service summary showed only its passing key check (0.10x
// naive) beside "does not hold", which failed on shed.
func TestSummaryNamesTheCheckThatFailsMost(t *testing.T) {
	s := synth(map[string]map[string][]float64{
		"cw": {"p99": {1, 1, 1}, "share": {0.5, 0.5, 0.95}, "other": {0.95, 0.5, 0.95}},
		"a":  {"p99": {2, 2, 2}},
	})
	judge(s, []check{
		{label: "p99", judged: "cw", against: []string{"a"}, metric: "p99", limit: 1},
		{label: "other", judged: "cw", metric: "other", higher: true, limit: 0.9},
		{label: "share", judged: "cw", metric: "share", higher: true, limit: 0.9},
	})
	if !strings.Contains(s.Summary, "key check p99") || !strings.Contains(s.Summary, "fails most: share") || !strings.Contains(s.Summary, "(1/3)") {
		t.Errorf("summary %q: want the key check and the check that fails most (share, 1/3)", s.Summary)
	}
	s = synth(map[string]map[string][]float64{"cw": {"p99": {1, 1, 1}}, "a": {"p99": {2, 2, 2}}})
	judge(s, []check{{label: "p99", judged: "cw", against: []string{"a"}, metric: "p99", limit: 1}})
	if strings.Contains(s.Summary, "fails most") {
		t.Errorf("summary %q of a verdict that holds names a failing check", s.Summary)
	}
}
