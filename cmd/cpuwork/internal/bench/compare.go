package bench

import (
	"slices"

	"github.com/cpuwork/cpuwork/cmd/cpuwork/internal/judge"
)

// Verdict is a comparison's outcome in one word (package judge).
type Verdict = judge.Verdict

const (
	Better       = judge.Better
	Equivalent   = judge.Equivalent
	Worse        = judge.Worse
	Inconclusive = judge.Inconclusive
)

// JudgeOnce judges a comparison of a fixed number of pairs, looked at
// once (package judge).
func JudgeOnce(ratios, aa []float64, higher bool) judge.Judgement {
	return judge.JudgeOnce(ratios, aa, higher)
}

// The stopping rule: every comparison gets at least minPairs pairs and
// is judged again at the looks (3, 6, 12, 24 and, for the bursts of the
// default run, 48 pairs) until it is decided (better, equivalent or
// worse) or has its cap of pairs. Each look is another chance of a wrong
// verdict, so there are few of them and each is at Pocock's level for
// the looks up to the cap: TestSequentialVerdictErrorRates measures the
// error rate of this rule on this machine's noise.
const (
	minPairs         = 3
	defaultMaxPairs  = 12
	thoroughMaxPairs = 24
	// burstMaxPairs is the default run's cap for the short burst, whose
	// pairs take two seconds and whose makespan needs 24-48 of them here.
	burstMaxPairs = 48
)

// looks are the pair counts after which a comparison is judged.
var looks = []int{minPairs, 6, defaultMaxPairs, thoroughMaxPairs, burstMaxPairs}

// isLook reports whether a comparison is judged after n pairs.
func isLook(n int) bool { return slices.Contains(looks, n) }

// loadNoise names the scenarios whose checks are p99s of open-loop load
// near a capacity measured minutes before: their noise needs more pairs
// than the default cap to resolve 20 % (docs/bench.md).
var loadNoise = map[string]bool{"service": true, "inference": true, "timers": true, "neighbour": true}

// decide is the verdict on ratios (judged/comparator per pair) with the
// margin from the A/A control's per-pair ratios aa, in a run whose cap of
// pairs is maxPairs.
func decide(ratios, aa []float64, higher bool, maxPairs int) Verdict {
	if unstable(aa, lookLevel(maxPairs)) != "" {
		return Inconclusive // not judged: never a verdict
	}
	_, lo, hi, _ := judge.ComparisonInterval(ratios, aa, lookLevel(maxPairs))
	return judge.ThreeWay(lo, hi, judge.AAMargin(aa), higher)
}

// pocock is the per-look two-sided error rate that keeps the overall
// rate at 5 % over K equally informative looks (Pocock, Biometrika 64,
// 1977, table 1; Jennison & Turnbull, J. R. Stat. Soc. B 51, 1989:
// intervals at this level at every look cover the true ratio at all looks
// together with 95 % probability: repeated confidence intervals).
var pocock = map[int]float64{1: 0.05, 2: 0.0294, 3: 0.0221, 4: 0.0182, 5: 0.0158}

// lookLevel is the confidence level of each look's interval in a run
// whose cap is maxPairs: 95 % over all its looks together.
func lookLevel(maxPairs int) float64 {
	k := max(len(looksTo(maxPairs)), 1) // a run of fewer pairs than the first look judges once
	if a, ok := pocock[k]; ok {
		return 1 - a
	}
	return 1 - 0.05/float64(k) // Bonferroni beyond the table
}

// runMean is the mean of n values given the mean of the first n-1 and
// the n-th, x.
func runMean(mean, x float64, n int) float64 {
	if n <= 1 {
		return x
	}
	return mean + (x-mean)/float64(n)
}
