package bench

import (
	"fmt"
	"math"
	"slices"
	"sync"

	"gonum.org/v1/gonum/stat/distuv"
)

// The statistics of a comparison (docs/bench.md#how-to-read-a-verdict).
//
// A comparison has n paired repeats: in pair i the judged variant and its
// comparator ran in the same round, alternated, so drift between rounds
// hits both. Its estimate is the geometric mean of the per-pair ratios
// judged/comparator, its 95 % confidence interval Student's t interval on
// the mean of the log ratios (the ratio-of-geometric-means interval of
// average bioequivalence testing: Schuirmann 1987; FDA guidance
// "Statistical Approaches to Establishing Bioequivalence", 2001). A
// bootstrap over pairs covers far less than 95 % at the 3-10 pairs the
// bench can afford (its percentile interval of 3 pairs is about their
// range), and a signed-rank interval cannot reach 95 % below 6 pairs; the
// t interval is exact for normal log ratios at any n >= 2 and its error
// rate on this machine's real, heavier-tailed noise is measured by
// TestSequentialVerdictErrorRates.
//
// The equivalence margin m comes from the A/A control of the same
// scenario and case — the comparator against a second, identical copy of
// itself, alternated the same way — as the bias between two arms that are
// the same thing that its interval establishes, with a floor of 5 %
// (aaMargin). The comparison's own interval already covers its random
// error, with its per-pair spread at least the control's
// (comparisonInterval); the margin is the instrument's bias on top.

// Verdict is a comparison's outcome in one word.
type Verdict string

const (
	Better       Verdict = "better"
	Equivalent   Verdict = "equivalent"
	Worse        Verdict = "worse"
	Inconclusive Verdict = "inconclusive"
)

// confidence is the level of every interval.
const confidence = 0.95

// marginFloor is the smallest equivalence margin: differences under 5 %
// are called equivalent whatever the A/A control shows.
const marginFloor = 0.05

// pairedInterval returns the geometric-mean ratio of ratios (each
// judged/comparator of one pair, > 0) and its two-sided confidence
// interval at level. With fewer than two pairs the interval is unbounded.
func pairedInterval(ratios []float64, level float64) (est, lo, hi float64) {
	n := len(ratios)
	if n == 0 {
		return math.NaN(), 0, math.Inf(1)
	}
	mean, sd := logMeanSpread(ratios)
	if n < 2 {
		return math.Exp(mean), 0, math.Inf(1)
	}
	half := tHalfWidth(sd, n, n-1, level)
	return math.Exp(mean), math.Exp(mean - half), math.Exp(mean + half)
}

// comparisonInterval is pairedInterval of ratios, widened when the
// A/A control (aa: the same case's per-pair ratios of the comparator
// against itself, two or more) shows the run noisier than the
// comparison's own pairs do: then it is the t interval on the spread
// pooled from the comparison's and the control's pairs (the pooled
// variance, with the degrees of freedom of both), if that is wider.
// widened reports it. Three pairs can agree closely by chance (their
// spread has 2 degrees of freedom); the control measures the run's noise
// on the same metric in the same rounds, and pooling it keeps a chance
// agreement from making a verdict, while a comparison noisier than its
// control keeps its own, wider interval.
func comparisonInterval(ratios, aa []float64, level float64) (est, lo, hi float64, widened bool) {
	est, lo, hi = pairedInterval(ratios, level)
	n, k := len(ratios), len(aa)
	if n < 2 || k < 2 {
		return est, lo, hi, false
	}
	mean, own := logMeanSpread(ratios)
	half := tHalfWidth(pooledSpread(own, n, aa), n, n-1+k-1, level)
	if math.Exp(mean+half) <= hi {
		return est, lo, hi, false
	}
	return est, math.Exp(mean - half), math.Exp(mean + half), true
}

// pooledSpread is the spread in logs pooled from a comparison's own,
// own over n pairs, and its A/A control's per-pair ratios aa (two or
// more): the pooled variance, each weighted by its degrees of freedom.
func pooledSpread(own float64, n int, aa []float64) float64 {
	_, ctl := logMeanSpread(aa)
	k := len(aa)
	return math.Sqrt((float64(n-1)*own*own + float64(k-1)*ctl*ctl) / float64(n-1+k-1))
}

// logMeanSpread is the mean and the sample standard deviation (0 for
// one value) of the logs of xs (> 0, one or more).
func logMeanSpread(xs []float64) (mean, sd float64) {
	for _, x := range xs {
		mean += math.Log(x)
	}
	mean /= float64(len(xs))
	if len(xs) < 2 {
		return mean, 0
	}
	var ss float64
	for _, x := range xs {
		d := math.Log(x) - mean
		ss += d * d
	}
	return mean, math.Sqrt(ss / float64(len(xs)-1))
}

// tHalfWidth is the half-width, in logs, of the two-sided t interval at
// level on the mean of n values whose spread sd has df degrees of
// freedom.
func tHalfWidth(sd float64, n, df int, level float64) float64 {
	t := tQuantile(1-(1-level)/2, df)
	return t * sd / math.Sqrt(float64(n))
}

// tQuantile is Student's t quantile at p with df degrees of freedom,
// remembered: the engine and its simulations ask for the same few
// thousand again and again, and each costs an incomplete-beta inversion.
func tQuantile(p float64, df int) float64 {
	key := tKey{p, df}
	tCache.Lock()
	defer tCache.Unlock()
	if q, ok := tCache.m[key]; ok {
		return q
	}
	q := distuv.StudentsT{Mu: 0, Sigma: 1, Nu: float64(df)}.Quantile(p)
	if tCache.m == nil {
		tCache.m = map[tKey]float64{}
	}
	tCache.m[key] = q
	return q
}

type tKey struct {
	p  float64
	df int
}

var tCache struct {
	sync.Mutex
	m map[tKey]float64
}

// unstableControl says why an A/A control cannot give a margin, or "":
// its interval at level (the comparison's own) lies wholly beyond the
// margin floor (two identical arms
// differ by more than 5 %: a bias the run cannot tell from an effect,
// which would otherwise widen the margin until a real 10 % difference
// reads equivalent), or, over 6 or more pairs, its per-pair ratios drift
// (the slope of their logs over the pairs is nonzero at 95 % and adds up
// to more than the floor across the run).
func unstableControl(aa []float64, level float64) string {
	if len(aa) < 2 {
		return ""
	}
	est, lo, hi := pairedInterval(aa, level)
	if lo > 1+marginFloor || hi < 1/(1+marginFloor) {
		return fmt.Sprintf("unstable control: the A/A control differs from itself by %.2fx [%.2f-%.2f], beyond the %.0f %% floor", est, lo, hi, 100*marginFloor)
	}
	n := len(aa)
	if n < 6 {
		return ""
	}
	// Least squares of log ratio on the pair's index.
	var mx, my float64
	for i, x := range aa {
		mx += float64(i)
		my += math.Log(x)
	}
	mx /= float64(n)
	my /= float64(n)
	var sxx, sxy float64
	for i, x := range aa {
		dx := float64(i) - mx
		sxx += dx * dx
		sxy += dx * (math.Log(x) - my)
	}
	slope := sxy / sxx
	var sse float64
	for i, x := range aa {
		r := math.Log(x) - my - slope*(float64(i)-mx)
		sse += r * r
	}
	se := math.Sqrt(sse / float64(n-2) / sxx)
	t := tQuantile(1-(1-level)/2, n-2)
	if math.Abs(slope) > t*se && math.Abs(slope)*float64(n-1) > math.Log(1+marginFloor) {
		return fmt.Sprintf("unstable control: the A/A control drifts by %.2fx over the %d pairs", math.Exp(slope*float64(n-1)), n)
	}
	return ""
}

// aaMargin is the equivalence margin from an A/A control's per-pair
// ratios: the part of the control's difference from 1 that its own 95 %
// interval establishes (the interval's edge nearest 1, when the interval
// excludes 1), at least marginFloor. An A/A control whose interval holds 1
// shows no bias beyond its noise, which the comparison's own interval
// already carries: the margin is then the floor. With fewer than two A/A
// pairs it is the floor.
func aaMargin(aa []float64) float64 {
	if len(aa) < 2 {
		return marginFloor
	}
	_, lo, hi := pairedInterval(aa, confidence)
	switch {
	case lo > 1:
		return max(marginFloor, lo-1)
	case hi < 1:
		return max(marginFloor, 1/hi-1)
	}
	return marginFloor
}

// threeWay decides a comparison from its interval [lo, hi] of the ratio
// judged/comparator and margin m: for a lower-is-better metric better
// when hi < 1/(1+m), worse when lo > 1+m, equivalent when the interval
// lies inside [1/(1+m), 1+m], inconclusive otherwise; mirrored when
// higher is better.
func threeWay(lo, hi, m float64, higher bool) Verdict {
	if higher {
		lo, hi = 1/hi, 1/lo
	}
	switch {
	case hi < 1/(1+m):
		return Better
	case lo > 1+m:
		return Worse
	case lo >= 1/(1+m) && hi <= 1+m:
		return Equivalent
	}
	return Inconclusive
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
	if unstableControl(aa, lookLevel(maxPairs)) != "" {
		return Inconclusive // not judged: never a verdict
	}
	_, lo, hi, _ := comparisonInterval(ratios, aa, lookLevel(maxPairs))
	return threeWay(lo, hi, aaMargin(aa), higher)
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

// Judgement is JudgeOnce's outcome: the geometric-mean ratio and its
// 95 % interval (widened by the control as comparisonInterval does), the
// A/A control's own geometric mean, the equivalence margin and the
// three-way verdict.
type Judgement struct {
	Ratio, Lo, Hi, AA, Margin float64
	Verdict                   Verdict
}

// JudgeOnce judges a comparison of a fixed number of pairs, looked at
// once: ratios are judged/comparator per pair (> 0), aa the A/A
// control's per-pair ratios (the comparator against a second copy of
// itself, alternated the same way), higher says a higher value is
// better. An unstable control gives no verdict (Inconclusive).
func JudgeOnce(ratios, aa []float64, higher bool) Judgement {
	var j Judgement
	j.Ratio, j.Lo, j.Hi, _ = comparisonInterval(ratios, aa, confidence)
	j.AA, _, _ = pairedInterval(aa, confidence)
	j.Margin = aaMargin(aa)
	j.Verdict = Inconclusive
	if unstableControl(aa, confidence) == "" {
		j.Verdict = threeWay(j.Lo, j.Hi, j.Margin, higher)
	}
	return j
}
