package bench

import (
	"encoding/json"
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
	for _, capN := range []int{defaultMaxPairs, thoroughMaxPairs} {
		for _, name := range names {
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
