// Package judge is the bench's statistics of a paired comparison: the
// interval of a geometric-mean ratio, the equivalence margin from an A/A
// control, and the three-way verdict. The doctor's --prove uses it too,
// so it holds nothing of the bench's workloads.
package judge

import (
	"fmt"
	"math"
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
// (AAMargin). The comparison's own interval already covers its random
// error, with its per-pair spread at least the control's
// (ComparisonInterval); the margin is the instrument's bias on top.

// Verdict is a comparison's outcome in one word.
type Verdict string

const (
	Better       Verdict = "better"
	Equivalent   Verdict = "equivalent"
	Worse        Verdict = "worse"
	Inconclusive Verdict = "inconclusive"
)

// Confidence is the level of every interval.
const Confidence = 0.95

// MarginFloor is the smallest equivalence margin: differences under 5 %
// are called equivalent whatever the A/A control shows.
const MarginFloor = 0.05

// PairedInterval returns the geometric-mean ratio of ratios (each
// judged/comparator of one pair, > 0) and its two-sided confidence
// interval at level. With fewer than two pairs the interval is unbounded.
func PairedInterval(ratios []float64, level float64) (est, lo, hi float64) {
	n := len(ratios)
	if n == 0 {
		return math.NaN(), 0, math.Inf(1)
	}
	mean, sd := LogMeanSpread(ratios)
	if n < 2 {
		return math.Exp(mean), 0, math.Inf(1)
	}
	half := tHalfWidth(sd, n, n-1, level)
	return math.Exp(mean), math.Exp(mean - half), math.Exp(mean + half)
}

// ComparisonInterval is PairedInterval of ratios, widened when the
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
func ComparisonInterval(ratios, aa []float64, level float64) (est, lo, hi float64, widened bool) {
	est, lo, hi = PairedInterval(ratios, level)
	n, k := len(ratios), len(aa)
	if n < 2 || k < 2 {
		return est, lo, hi, false
	}
	mean, own := LogMeanSpread(ratios)
	half := tHalfWidth(PooledSpread(own, n, aa), n, n-1+k-1, level)
	if math.Exp(mean+half) <= hi {
		return est, lo, hi, false
	}
	return est, math.Exp(mean - half), math.Exp(mean + half), true
}

// PooledSpread is the spread in logs pooled from a comparison's own,
// own over n pairs, and its A/A control's per-pair ratios aa (two or
// more): the pooled variance, each weighted by its degrees of freedom.
func PooledSpread(own float64, n int, aa []float64) float64 {
	_, ctl := LogMeanSpread(aa)
	k := len(aa)
	return math.Sqrt((float64(n-1)*own*own + float64(k-1)*ctl*ctl) / float64(n-1+k-1))
}

// LogMeanSpread is the mean and the sample standard deviation (0 for
// one value) of the logs of xs (> 0, one or more).
func LogMeanSpread(xs []float64) (mean, sd float64) {
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
	t := TQuantile(1-(1-level)/2, df)
	return t * sd / math.Sqrt(float64(n))
}

// TQuantile is Student's t quantile at p with df degrees of freedom,
// remembered: the engine and its simulations ask for the same few
// thousand again and again, and each costs an incomplete-beta inversion.
func TQuantile(p float64, df int) float64 {
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

// UnstableControl says why an A/A control cannot give a margin, or "":
// its interval at level (the comparison's own) lies wholly beyond the
// margin floor (two identical arms
// differ by more than 5 %: a bias the run cannot tell from an effect,
// which would otherwise widen the margin until a real 10 % difference
// reads equivalent), or, over 6 or more pairs, its per-pair ratios drift
// (the slope of their logs over the pairs is nonzero at 95 % and adds up
// to more than the floor across the run).
func UnstableControl(aa []float64, level float64) string {
	if len(aa) < 2 {
		return ""
	}
	est, lo, hi := PairedInterval(aa, level)
	if lo > 1+MarginFloor || hi < 1/(1+MarginFloor) {
		return fmt.Sprintf("unstable control: the A/A control differs from itself by %.2fx [%.2f-%.2f], beyond the %.0f %% floor", est, lo, hi, 100*MarginFloor)
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
	t := TQuantile(1-(1-level)/2, n-2)
	if math.Abs(slope) > t*se && math.Abs(slope)*float64(n-1) > math.Log(1+MarginFloor) {
		return fmt.Sprintf("unstable control: the A/A control drifts by %.2fx over the %d pairs", math.Exp(slope*float64(n-1)), n)
	}
	return ""
}

// AAMargin is the equivalence margin from an A/A control's per-pair
// ratios: the part of the control's difference from 1 that its own 95 %
// interval establishes (the interval's edge nearest 1, when the interval
// excludes 1), at least MarginFloor. An A/A control whose interval holds 1
// shows no bias beyond its noise, which the comparison's own interval
// already carries: the margin is then the floor. With fewer than two A/A
// pairs it is the floor.
func AAMargin(aa []float64) float64 {
	if len(aa) < 2 {
		return MarginFloor
	}
	_, lo, hi := PairedInterval(aa, Confidence)
	switch {
	case lo > 1:
		return max(MarginFloor, lo-1)
	case hi < 1:
		return max(MarginFloor, 1/hi-1)
	}
	return MarginFloor
}

// ThreeWay decides a comparison from its interval [lo, hi] of the ratio
// judged/comparator and margin m: for a lower-is-better metric better
// when hi < 1/(1+m), worse when lo > 1+m, equivalent when the interval
// lies inside [1/(1+m), 1+m], inconclusive otherwise; mirrored when
// higher is better.
func ThreeWay(lo, hi, m float64, higher bool) Verdict {
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

// Judgement is JudgeOnce's outcome: the geometric-mean ratio and its
// 95 % interval (widened by the control as ComparisonInterval does), the
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
	j.Ratio, j.Lo, j.Hi, _ = ComparisonInterval(ratios, aa, Confidence)
	j.AA, _, _ = PairedInterval(aa, Confidence)
	j.Margin = AAMargin(aa)
	j.Verdict = Inconclusive
	if UnstableControl(aa, Confidence) == "" {
		j.Verdict = ThreeWay(j.Lo, j.Hi, j.Margin, higher)
	}
	return j
}
