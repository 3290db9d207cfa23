package bench

import (
	"encoding/json"
	"fmt"
	"github.com/cpuwork/cpuwork/cmd/cpuwork/internal/judge"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
)

// pairNoise is testdata/pair-noise.json (scripts/pair-noise.py): per
// scenario, the centred per-repeat log ratios of the checked-in runs.
func pairNoise(t *testing.T) map[string][]float64 {
	t.Helper()
	b, err := os.ReadFile("testdata/pair-noise.json")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Residuals map[string][]float64 `json:"residuals"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	return f.Residuals
}

// simulate runs the bench's sequential rule on simulated pairs: per
// pair, the comparison's log ratio is comparison() and the A/A control's
// a symmetric residual; it looks at the rule's looks and stops at the
// first decided verdict or at maxPairs.
func simulate(rng *rand.Rand, noise []float64, comparison func() float64, maxPairs int) (Verdict, int) {
	var ratios, aa []float64
	for n := 1; n <= maxPairs; n++ {
		ratios = append(ratios, math.Exp(comparison()))
		aa = append(aa, math.Exp(symmetric(rng, noise)))
		if !isLook(n) {
			continue
		}
		if v := decide(ratios, aa, false, maxPairs); v != Inconclusive {
			return v, n
		}
	}
	return decide(ratios, aa, false, maxPairs), maxPairs
}

// symmetric draws a residual with a random sign: an A/A control's ratio
// and its inverse are equally likely (the two arms are the same thing),
// while a comparison of two different variants may be skewed.
func symmetric(rng *rand.Rand, noise []float64) float64 {
	x := noise[rng.IntN(len(noise))]
	if rng.IntN(2) == 0 {
		return -x
	}
	return x
}

// TestSequentialVerdictErrorRates: on the noise of this machine's
// checked-in runs, with the bench's stopping rule (look after every pair
// from minPairs to the cap, stop when decided), an A/A comparison comes
// out better or worse in at most 5 % of simulated runs for every
// scenario's noise, and a true 20 % difference is called better in at
// least 90 % at the default cap on the noise of the scenarios whose
// metrics are not load-level p99s. The rates of every source are logged
// (docs/bench.md quotes them).
func TestSequentialVerdictErrorRates(t *testing.T) {
	noise := pairNoise(t)
	var all []float64
	var names []string
	for name := range noise {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names { // in a fixed order: the draws are reproducible
		all = append(all, noise[name]...)
	}
	noise["all"] = all
	names = append(names, "all")
	const sims = 4000
	for _, capN := range []int{minPairs, 6, defaultMaxPairs, thoroughMaxPairs, burstMaxPairs} { // 3 and 6: where the default run often stops
		for _, name := range names {
			if capN == burstMaxPairs && name != "burst" { // the default run's cap for the short burst only
				continue
			}
			rng := rand.New(rand.NewPCG(1, uint64(len(name))))
			var aaWrong, hit, pairs int
			for range sims {
				// An A/A comparison: symmetric noise on both sides.
				v, n := simulate(rng, noise[name], func() float64 { return symmetric(rng, noise[name]) }, capN)
				if v == Better || v == Worse {
					aaWrong++
				}
				pairs += n
				// A true 20 % difference, with the noise as measured (it may be skewed).
				shifted := func() float64 { return math.Log(0.8) + noise[name][rng.IntN(len(noise[name]))] }
				if v, _ := simulate(rng, noise[name], shifted, capN); v == Better {
					hit++
				}
			}
			aaRate, power := float64(aaWrong)/sims, float64(hit)/sims
			t.Logf("cap %2d %-11s (%4d residuals): A/A better-or-worse %5.2f %%, mean pairs %.1f; 20 %% lower called better %5.1f %%",
				capN, name, len(noise[name]), 100*aaRate, float64(pairs)/sims, 100*power)
			if aaRate > 0.05 {
				t.Errorf("cap %d, %s noise: A/A comparisons better or worse in %.1f %% of runs, want <= 5 %%", capN, name, 100*aaRate)
			}
			if capN == defaultMaxPairs && !loadNoise[name] && name != "all" && power < 0.90 {
				t.Errorf("cap %d, %s noise: a true 20 %% difference called better in %.1f %% of runs, want >= 90 %%", capN, name, 100*power)
			}
		}
	}
}

// judgeSim runs the engine's own judge on simulated pairs of one check:
// the judged variant and k alternatives, each pair's value of each the
// exponential of a per-variant draw (half a residual's spread each, so
// that a ratio of two carries a residual's), the judged one shifted by
// shift (a log ratio); the A/A control is alternative a0 against a copy
// whose draws are its own. It looks as the run does — at the looks up to
// maxPairs at Pocock's level, or once at 95 % when once is set — and
// stops at the first decided verdict.
func judgeSim(rng *rand.Rand, noise []float64, k int, shift float64, maxPairs int, once bool, drift float64, bound bool) (Verdict, string) {
	draw := func() float64 { return symmetric(rng, noise) / math.Sqrt2 }
	vals := map[string][]float64{}
	names := []string{"cw", "a0-aa"}
	var against []string
	for i := range k {
		a := fmt.Sprintf("a%d", i)
		against = append(against, a)
		names = append(names, a)
	}
	level := lookLevel(maxPairs)
	if once {
		level = judge.Confidence
	}
	c := check{label: "sim", judged: "cw", against: against, metric: "p99", aa: [2]string{"a0", "a0-aa"}}
	if bound {
		// The last alternative's value is an upper bound on every pair
		// (as a capacity that missed the objective at its first step is).
		last := against[k-1]
		c.of = func(s *Scenario, name string, i int) (float64, string, error) {
			x, _ := metricOf(s.variant(name).Repeats[i], "p99")
			if name == last {
				return x, last + " is an upper bound", nil
			}
			return x, "", nil
		}
	}
	var r CheckResult
	for n := 1; n <= maxPairs; n++ {
		for _, name := range names {
			x := draw()
			switch name {
			case "cw":
				x += shift
			case "a0-aa":
				x += drift * float64(n-1) // a control drifting over the run
			}
			vals[name] = append(vals[name], math.Exp(x))
		}
		if once && n < maxPairs || !once && !isLook(n) {
			continue
		}
		s := &Scenario{Name: "sim", level: level}
		for _, name := range names {
			v := &Variant{Name: name, Valid: true}
			for _, x := range vals[name] {
				rp := Repeat{}
				setMetric(&rp, "p99", x)
				v.Repeats = append(v.Repeats, rp)
			}
			s.Variants = append(s.Variants, v)
		}
		r = evaluate(s, c)
		if r.NotJudged == "" && r.Verdict != Inconclusive {
			break
		}
	}
	return r.Verdict, r.NotJudged
}

// TestVerdictErrorRatesWithSeveralAlternatives: on this machine's pair
// noise, judged by the engine itself (evaluate), with 1 to 6 alternatives
// that all tie with the judged variant, a comparison reads "worse" in at
// most 2.5 % of runs and "better" in at most 2.5 % (each side's share of
// the 5 %), whether it looks once (--repeat) or at the looks up to the
// cap: choosing the best alternative on the pairs it is compared on
// favours the alternatives, and the engine must pay for that choice. A
// control drifting 3 % a pair beside a true 10 % difference reads
// "equivalent" in at most 5 %. The rates, and how often a true 1.25x
// is called worse, are logged (docs/bench.md).
func TestVerdictErrorRatesWithSeveralAlternatives(t *testing.T) {
	noise := pairNoise(t)
	var names []string
	for name := range noise {
		names = append(names, name)
	}
	slices.Sort(names)
	const sims = 1000
	for _, rule := range []struct {
		name  string
		max   int
		once  bool
		bound bool
	}{{"looks to 12", defaultMaxPairs, false, false}, {"once at 6", 6, true, false}, {"bound, 12", defaultMaxPairs, false, true}} {
		for _, k := range []int{1, 2, 4, 6} {
			if k < 4 && rule.name != "looks to 12" {
				continue
			}
			for _, name := range names {
				rng := rand.New(rand.NewPCG(uint64(k), uint64(len(name))))
				var worse, better, power int
				for range sims {
					switch v, _ := judgeSim(rng, noise[name], k, 0, rule.max, rule.once, 0, rule.bound); v {
					case Worse:
						worse++
					case Better:
						better++
					}
					if v, _ := judgeSim(rng, noise[name], k, math.Log(1.25), rule.max, rule.once, 0, rule.bound); v == Worse {
						power++
					}
				}
				w, b := float64(worse)/float64(sims), float64(better)/float64(sims)
				t.Logf("%-11s %d alternatives %-11s: tie read worse %5.2f %%, better %5.2f %%; true 1.25x called worse %5.1f %%", rule.name, k, name, 100*w, 100*b, 100*float64(power)/float64(sims))
				if w > 0.025 || b > 0.025 {
					t.Errorf("%s, %d tied alternatives, %s noise: worse %.2f %%, better %.2f %%, want each <= 2.5 %%", rule.name, k, name, 100*w, 100*b)
				}
			}
		}
	}
	for _, name := range names {
		rng := rand.New(rand.NewPCG(99, uint64(len(name))))
		var equivalent, notJudged int
		for range sims {
			v, why := judgeSim(rng, noise[name], 1, math.Log(1.1), 12, true, math.Log(1.03), false)
			switch {
			case why != "":
				notJudged++
			case v == Equivalent:
				equivalent++
			}
		}
		e := float64(equivalent) / float64(sims)
		t.Logf("drifting control, true 1.10x, %-11s: equivalent %5.2f %%, not judged %5.1f %%", name, 100*e, 100*float64(notJudged)/float64(sims))
		if e > 0.05 {
			t.Errorf("%s noise: a true 10 %% difference beside a drifting control read equivalent in %.2f %%, want <= 5 %%", name, 100*e)
		}
	}
}
