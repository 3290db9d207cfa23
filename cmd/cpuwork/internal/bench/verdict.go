package bench

import (
	"fmt"
	"github.com/cpuwork/cpuwork/cmd/cpuwork/internal/judge"
	"math"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/gonum/stat/distuv"
)

// The verdict engine. Every scenario declares its claim as checks; one
// function, judge, turns them into verdicts (docs/bench.md#how-to-read-a-verdict):
//
//   - A comparison (a check with alternatives) compares the judged
//     variant — the one the docs tell a user to use for that workload —
//     with the best alternative a user would pick instead: the one with
//     the best geometric mean over the check's pairs. Its per-pair ratios
//     judged/best, from repeats that ran alternated in the same round,
//     give an estimate and a 95 % interval (compare.go); the A/A control
//     of the same case gives the equivalence margin; the verdict is
//     better, equivalent, worse or inconclusive. With k alternatives the
//     end of the interval that decides "worse" is at 1-(1-level)/k: the
//     choice of the best on the same pairs leans that way (Bonferroni).
//   - A figure (a check with no alternatives, or marked goal) is a
//     measurement beside its goal and, where one ran, the floor measured
//     in the same run: it is reported, never part of a verdict.
//   - Each check is judged on its own pairs (the repeats in which every
//     variant it needs was measured and judged): never combined with
//     another check's repeats by position.
//   - A variant a comparison needs that is missing, skipped or invalid,
//     or a value that is not a finite measurement, makes that comparison
//     "not judged" with the reason: never dropped, never judged on +Inf.

// Status is a scenario's outcome in one word: the worst of its
// comparisons' verdicts that is decided (worse before better before
// equivalent), inconclusive when none is decided, or not judged, skipped
// or smoke test (a --quick run, which judges nothing).
type Status string

const (
	StatusBetter       Status = "better"
	StatusEquivalent   Status = "equivalent"
	StatusWorse        Status = "worse"
	StatusInconclusive Status = "inconclusive"
	StatusNotJudged    Status = "not judged"
	StatusSkipped      Status = "skipped"
	StatusSmoke        Status = "smoke test"
)

// check is one comparison or figure of a claim.
type check struct {
	label  string // "case: what is compared", e.g. "alone: critical p99"
	judged string // the variant judged
	// against lists the alternatives: the best of them (by geometric mean
	// over the pairs) is the comparator. Empty: a figure.
	against []string
	metric  string // "p99", "mean", "p50", "p90", "p999", "max", "throughput", or a per-repeat Extra key
	higher  bool   // higher is better (throughput, shares)
	// limit is the goal: for a figure the value it aims at (a maximum, or
	// a minimum with higher), for a comparison the ratio the published
	// claim states (shown beside the verdict, never deciding it); 0: none.
	limit float64
	unit  string // how values print: "s" (as ms), "%", "/s", "x", "" (by the metric's name)
	// goal makes a check with alternatives a figure: a ratio to something
	// that is not an alternative (the same variant at another load).
	goal bool
	// floor, for a figure, names the variant whose same metric is the
	// floor measured in the same run (the critical p99 with no batch work).
	floor string
	// aa names the A/A control of the check's case: aa[1] is a second,
	// identical copy of aa[0] run in the same rounds; its per-pair ratios
	// on the same metric give the equivalence margin.
	aa [2]string
	// of, when set, replaces the metric lookup (a value derived from
	// several variants, like the capacity at a p99 target): it returns the
	// value of variant in repeat i, and note says how it was bounded.
	of func(s *Scenario, variant string, i int) (v float64, note string, err error)
	// needs, with of, lists the variants of derives from: each must be
	// valid with paired repeats (judged and against are then names of
	// of's, not variants).
	needs []string
}

// figure reports whether c is a figure rather than a comparison.
func (c check) figure() bool { return len(c.against) == 0 || c.goal }

// where is the case of a check: its label up to the first ": ".
func (c check) where() string {
	w, _, ok := strings.Cut(c.label, ": ")
	if !ok {
		return ""
	}
	return w
}

// CheckResult is a check's outcome, as results.json records it.
type CheckResult struct {
	Label string `json:"label"`
	Case  string `json:"case,omitempty"`
	// Kind is "comparison" (a verdict against the best alternative) or
	// "figure" (a measurement beside its goal, never a verdict).
	Kind           string   `json:"kind"`
	Judged         string   `json:"judged"`
	Against        []string `json:"against,omitempty"`
	Metric         string   `json:"metric"`
	HigherIsBetter bool     `json:"higher_is_better,omitempty"`
	Unit           string   `json:"unit,omitempty"`
	// A comparison's outcome: the verdict, the estimate (geometric mean of
	// the per-pair ratios judged/best alternative) with its 95 %
	// confidence interval, the equivalence margin (from the A/A control),
	// the number of pairs and the best alternative by name.
	Verdict  Verdict `json:"verdict,omitempty"`
	Estimate float64 `json:"estimate,omitempty"`
	CILow    float64 `json:"ci_low,omitempty"`
	CIHigh   float64 `json:"ci_high,omitempty"`
	Margin   float64 `json:"margin,omitempty"`
	// Level is the confidence level of [CILow, CIHigh] as computed at
	// this look (Pocock's per-look level; 0.95 looked at once); with
	// several alternatives the deciding end is wider (a note says how).
	Level           float64 `json:"level,omitempty"`
	Pairs           int     `json:"pairs"`
	BestAlternative string  `json:"best_alternative,omitempty"`
	// The A/A control the margin came from: its estimate and interval
	// over its own pairs (a value far from 1 says this run has a bias
	// between identical arms, which the margin then absorbs).
	AAControl  string  `json:"aa_control,omitempty"`
	AAEstimate float64 `json:"aa_estimate,omitempty"`
	AACILow    float64 `json:"aa_ci_low,omitempty"`
	AACIHigh   float64 `json:"aa_ci_high,omitempty"`
	AAPairs    int     `json:"aa_pairs,omitempty"`
	// Goal: the limit the claim or goal states (a ratio for a comparison,
	// a value for a figure), shown beside the result; Floor: for a figure,
	// the same metric of the floor variant (median of its repeats).
	Goal      float64 `json:"goal,omitempty"`
	Floor     float64 `json:"floor,omitempty"`
	FloorName string  `json:"floor_variant,omitempty"`
	// Per pair: the judged variant's value, the best alternative's, and
	// their ratio (a figure: its value).
	JudgedValues []float64 `json:"judged_values,omitempty"`
	BestValues   []float64 `json:"best_values,omitempty"`
	Values       []float64 `json:"values,omitempty"`
	Notes        []string  `json:"notes,omitempty"`
	NotJudged    string    `json:"not_judged,omitempty"` // why there is no verdict or value
	// PairsToDecide, for an inconclusive comparison, is about how many
	// pairs looked at once would decide it at this run's per-pair spread
	// (pairsToDecide); 0 otherwise.
	PairsToDecide int `json:"pairs_to_decide,omitempty"`
}

// judgeChecks evaluates checks against s's variants and sets s.Status,
// s.Checks, s.Summary and s.Verdict. A scenario already skipped stays
// skipped; a smoke test (quick) reports its figures and comparisons'
// values with no verdict.
func judgeChecks(s *Scenario, checks []check) {
	if s.Skipped != "" {
		s.Status = StatusSkipped
		return
	}
	s.Checks = nil
	for _, c := range checks {
		r := evaluate(s, c)
		if s.smoke && r.Kind == "comparison" && r.NotJudged == "" {
			r.Verdict = ""
		}
		if s.smoke && r.Kind != "comparison" && r.Goal > 0 {
			// One pair measures nothing to hold a goal to: a figure past
			// its goal here is not a miss.
			r.Notes = append(r.Notes, "goal not judged: smoke test")
		}
		s.Checks = append(s.Checks, r)
	}
	s.Status, s.Summary = summarize(s)
	if s.Calibration != "" && s.Status != StatusSmoke {
		s.Status = StatusNotJudged
		s.Summary = "not judged: calibration: " + s.Calibration
	}
	var lines []string
	for _, r := range s.Checks {
		lines = append(lines, r.line())
	}
	s.Verdict = s.Summary
	if len(lines) > 0 {
		s.Verdict += ". " + strings.Join(lines, "; ")
	}
}

// undecided counts the comparisons of s that are inconclusive and could
// still be decided by more pairs.
func (s *Scenario) undecided() int {
	n := 0
	for _, r := range s.Checks {
		if r.Kind == "comparison" && r.NotJudged == "" && r.Verdict == Inconclusive {
			n++
		}
	}
	return n
}

// summarize is a scenario's status and its findings in words, per case:
// "better in 3 of 3 cases", "equivalent", "worse at 95%".
func summarize(s *Scenario) (Status, string) {
	if s.smoke {
		return StatusSmoke, "no verdicts (one pair; run without --quick for verdicts)"
	}
	type caseFinding struct {
		where    string
		verdicts []Verdict
	}
	var cases []*caseFinding
	byCase := map[string]*caseFinding{}
	var notJudged []string
	for _, r := range s.Checks {
		if r.Kind != "comparison" {
			continue
		}
		if r.NotJudged != "" {
			notJudged = append(notJudged, r.Label+": "+r.NotJudged)
			continue
		}
		cf := byCase[r.Case]
		if cf == nil {
			cf = &caseFinding{where: r.Case}
			byCase[r.Case] = cf
			cases = append(cases, cf)
		}
		cf.verdicts = append(cf.verdicts, r.Verdict)
	}
	if len(cases) == 0 {
		switch {
		case len(notJudged) > 0:
			return StatusNotJudged, "not judged: " + strings.Join(dedupe(notJudged), "; ")
		}
		return StatusNotJudged, "not judged: no comparison declared"
	}
	// A case's finding is its worst decided verdict: worse if any of its
	// comparisons is worse, else better if any is better, else equivalent
	// if every one is, else inconclusive.
	caseVerdict := func(vs []Verdict) Verdict {
		switch {
		case slices.Contains(vs, Worse):
			return Worse
		case slices.Contains(vs, Better):
			return Better
		case !slices.Contains(vs, Inconclusive):
			return Equivalent
		}
		return Inconclusive
	}
	count := map[Verdict][]string{}
	for _, cf := range cases {
		v := caseVerdict(cf.verdicts)
		count[v] = append(count[v], cf.where)
	}
	var parts []string
	for _, v := range []Verdict{Worse, Better, Equivalent, Inconclusive} {
		ws := count[v]
		if len(ws) == 0 {
			continue
		}
		switch {
		case len(cases) == 1:
			parts = append(parts, string(v))
		case len(ws) == len(cases):
			parts = append(parts, fmt.Sprintf("%s in %d of %d cases", v, len(ws), len(cases)))
		default:
			parts = append(parts, fmt.Sprintf("%s %s", v, atCases(ws)))
		}
	}
	st := map[Verdict]Status{Worse: StatusWorse, Better: StatusBetter, Equivalent: StatusEquivalent, Inconclusive: StatusInconclusive}
	var status Status
	for _, v := range []Verdict{Worse, Better, Equivalent, Inconclusive} {
		if len(count[v]) > 0 {
			status = st[v]
			break
		}
	}
	sum := strings.Join(parts, ", ")
	if len(notJudged) > 0 {
		sum += fmt.Sprintf("; %d comparison(s) not judged", len(notJudged))
	}
	return status, sum
}

// atCases names cases in a finding: "at 95%", "beside nice0", "alone".
func atCases(ws []string) string {
	var out []string
	for _, w := range ws {
		switch {
		case w == "":
			out = append(out, "overall")
		case strings.HasSuffix(w, "%") || strings.HasPrefix(w, "0.") || strings.HasPrefix(w, "1."):
			out = append(out, "at "+w)
		default:
			out = append(out, w)
		}
	}
	return strings.Join(out, ", ")
}

func dedupe(xs []string) []string {
	var out []string
	for _, x := range xs {
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}

// evaluate decides one check on its own pairs.
func evaluate(s *Scenario, c check) CheckResult {
	e := &evaluation{s: s, c: c, r: CheckResult{Label: c.label, Case: c.where(), Kind: "comparison", Judged: c.judged, Against: c.against, Metric: c.metric,
		HigherIsBetter: c.higher, Unit: c.unit, Goal: c.limit}}
	if c.figure() {
		e.r.Kind = "figure"
	}
	if why := e.alternativesRan(); why != "" {
		return e.notJudged("%s", why)
	}
	c, r := e.c, &e.r
	idx, why := e.pairs()
	if why != "" {
		return e.notJudged("%s", why)
	}
	if c.metric == "p99_all_s" && c.of == nil {
		r.Notes = append(r.Notes, unansweredBounds(s, append([]string{c.judged}, c.against...), idx)...)
	}
	vals, why := e.values(idx)
	if why != "" {
		return e.notJudged("%s", why)
	}
	r.JudgedValues = vals[c.judged]
	r.Pairs = len(idx)
	if c.figure() && len(c.against) == 0 {
		e.figureAlone()
		return e.r
	}
	// The best alternative: the best geometric mean over the pairs.
	best, bestG := "", math.NaN()
	for _, a := range c.against {
		g := geomean(vals[a])
		if math.IsNaN(bestG) || (c.higher && g > bestG) || (!c.higher && g < bestG) {
			best, bestG = a, g
		}
	}
	r.BestAlternative = best
	r.BestValues = vals[best]
	if loss, ok := zeroLoss(r, c, idx, vals); ok {
		return loss
	}
	for k, jv := range r.JudgedValues {
		bv := r.BestValues[k]
		if bv <= 0 || jv <= 0 {
			return e.notJudged("pair %d: %s %v against %s %v, no ratio", idx[k]+1, c.judged, jv, best, bv)
		}
		r.Values = append(r.Values, jv/bv)
	}
	if c.figure() {
		r.Estimate = geomean(r.Values)
		return e.r
	}
	e.decide(e.aaRatios(idx), best)
	return e.r
}

// evaluation is one check being decided: its scenario, the check (its
// alternatives cut to those that ran) and the result so far.
type evaluation struct {
	s *Scenario
	c check
	r CheckResult
}

// notJudged is the result, not judged for the reason given.
func (e *evaluation) notJudged(format string, a ...any) CheckResult {
	e.r.NotJudged = fmt.Sprintf(format, a...)
	return e.r
}

// alternativesRan cuts the check's alternatives to those this run
// measured (--thorough's extras and --variants leave some out, noted):
// the reason the check is not judged when none was, else "".
func (e *evaluation) alternativesRan() string {
	c := &e.c
	if c.of != nil {
		return ""
	}
	var ran, out []string
	for _, a := range c.against {
		if e.s.variant(a) != nil {
			ran = append(ran, a)
		} else {
			out = append(out, a)
		}
	}
	if len(ran) == 0 && len(c.against) > 0 {
		return fmt.Sprintf("no alternative measured (%s)", strings.Join(c.against, ", "))
	}
	if len(out) > 0 {
		e.r.Notes = append(e.r.Notes, "not run here: "+strings.Join(out, ", "))
	}
	c.against, e.r.Against = ran, ran
	return ""
}

// value is the check's metric for variant name in repeat i.
func (e *evaluation) value(name string, i int) (float64, error) {
	c := &e.c
	if c.of != nil {
		x, note, err := c.of(e.s, name, i)
		if note != "" && !slices.Contains(e.r.Notes, note) {
			e.r.Notes = append(e.r.Notes, note)
		}
		return x, err
	}
	v := e.s.variant(name)
	if v == nil || i >= len(v.Repeats) {
		return 0, fmt.Errorf("%s repeat %d not measured", name, i+1)
	}
	x, ok := metricOf(v.Repeats[i], c.metric)
	if !ok {
		return 0, fmt.Errorf("%s repeat %d has no %s", name, i+1, c.metric)
	}
	return x, nil
}

// pairs are the repeats judged: those in which every variant the check
// needs was measured and judged, up to the count at which the
// comparison was decided (a decided comparison is not judged again on
// later pairs); else the reason none is.
func (e *evaluation) pairs() ([]int, string) {
	c, s, r := &e.c, e.s, &e.r
	names := append([]string{c.judged}, c.against...)
	if c.of != nil && len(c.needs) > 0 {
		names = c.needs
	}
	n := -1
	for _, name := range names {
		v := s.variant(name)
		switch {
		case v == nil:
			return nil, name + " not measured"
		case !v.Valid:
			return nil, fmt.Sprintf("%s invalid: %s", name, v.Invalid)
		case len(v.Repeats) == 0:
			return nil, name + " has no repeats"
		}
		if n == -1 || len(v.Repeats) < n {
			n = len(v.Repeats)
		}
	}
	limit := n
	if k, ok := s.decidedAt[c.label]; ok && !c.figure() {
		limit = min(n, k)
	}
	var idx []int
	for i := range n {
		if len(idx) == limit {
			break
		}
		if notJudgedRepeat(s, names, i) {
			r.Notes = append(r.Notes, fmt.Sprintf("repeat %d not judged", i+1))
			continue
		}
		// A pair in which a variant has no value of the metric (a dropped
		// reference) is left out of this check alone.
		missing := ""
		for _, name := range append([]string{c.judged}, c.against...) {
			if _, err := e.value(name, i); err != nil {
				missing = err.Error()
				break
			}
		}
		if missing != "" {
			r.Notes = append(r.Notes, fmt.Sprintf("pair %d left out: %s", i+1, missing))
			continue
		}
		idx = append(idx, i)
	}
	if len(idx) == 0 {
		return nil, fmt.Sprintf("no repeat judged (%s; the scenario's notes say why)", strings.Join(r.Notes, ", "))
	}
	return idx, ""
}

// values are the judged variant's and the alternatives' values on the
// pairs idx, by name; else the reason the check is not judged.
func (e *evaluation) values(idx []int) (map[string][]float64, string) {
	c := &e.c
	vals := map[string][]float64{}
	for _, name := range append([]string{c.judged}, c.against...) {
		for _, i := range idx {
			x, err := e.value(name, i)
			if err != nil {
				return nil, err.Error()
			}
			if !finite(x) {
				return nil, fmt.Sprintf("%s repeat %d: %s is %v, not a measurement", name, i+1, c.metric, x)
			}
			vals[name] = append(vals[name], x)
		}
	}
	return vals, ""
}

// figureAlone completes a figure without alternatives: its values, and
// its floor variant's median when one is named and measured.
func (e *evaluation) figureAlone() {
	c, r := &e.c, &e.r
	r.Values = r.JudgedValues
	if c.floor == "" {
		return
	}
	f := e.s.variant(c.floor)
	if f == nil || !f.Valid {
		return
	}
	var fs []float64
	for _, rp := range f.Repeats {
		if x, ok := metricOf(rp, c.metric); ok && finite(x) {
			fs = append(fs, x)
		}
	}
	if len(fs) > 0 {
		r.Floor, r.FloorName = median(fs), c.floor
	}
}

// aaRatios are the case's A/A control's ratios on the same metric and
// pairs (the interval's smallest spread and the equivalence margin),
// with its estimate and interval set in the result.
func (e *evaluation) aaRatios(idx []int) []float64 {
	c, s, r := &e.c, e.s, &e.r
	var aa []float64
	if c.aa[0] != "" {
		r.AAControl = c.aa[1] + " / " + c.aa[0]
		for _, i := range idx {
			if notJudgedRepeat(s, c.aa[:], i) || (c.of == nil && (!variantValid(s, c.aa[0]) || !variantValid(s, c.aa[1]))) {
				continue
			}
			x0, err0 := e.value(c.aa[0], i)
			x1, err1 := e.value(c.aa[1], i)
			if err0 == nil && err1 == nil && finite(x0) && finite(x1) && x0 > 0 && x1 > 0 {
				aa = append(aa, x1/x0)
			}
		}
		if len(aa) > 0 {
			r.AAEstimate, r.AACILow, r.AACIHigh = judge.PairedInterval(aa, judge.Confidence)
			r.AAPairs = len(aa)
			if len(aa) < 2 {
				r.AACILow, r.AACIHigh = 0, 0
			}
		}
	}
	switch {
	case len(aa) == 0:
		r.Notes = append(r.Notes, "no A/A control measured here: margin at its 5 % floor")
	case len(aa) < 3:
		r.Notes = append(r.Notes, fmt.Sprintf("an A/A control of %d pair(s): too few to show a bias; margin at its 5 %% floor", len(aa)))
	}
	return aa
}

// decide sets the comparison's interval, margin and verdict from its
// ratios against best, the best alternative, and the A/A ratios aa.
func (e *evaluation) decide(aa []float64, best string) {
	c, r := &e.c, &e.r
	level := e.s.level
	if level == 0 {
		level = judge.Confidence // judged outside a run (tests): one look
	}
	// The control's spread widens the interval only when it is the best
	// alternative's own: another variant's noise (Go's default GOMAXPROCS
	// throttled in a quota, against GOMAXPROCS 1) says nothing of this
	// comparison's.
	spread := aa
	if c.aa[0] != best {
		spread = nil
	}
	var widened bool
	r.Level = level
	r.Estimate, r.CILow, r.CIHigh, widened = judge.ComparisonInterval(r.Values, spread, level)
	if k := len(c.against); k > 1 {
		// The best alternative was chosen on these pairs: the best of k
		// that tie looks better than each does, so the ratio leans
		// towards worse. The interval's end that decides "worse" (and
		// bounds "equivalent" on the side of better) is taken at
		// 1-(1-level)/k: the chosen one is one of the k, so by the union
		// bound a tie reads worse at most as often as against one
		// alternative (Bonferroni). The other end needs no correction:
		// the choice only makes "better" harder.
		wide := 1 - (1-level)/float64(k)
		_, lo, hi, w := judge.ComparisonInterval(r.Values, spread, wide)
		widened = widened || w
		side := "lower"
		if c.higher {
			r.CIHigh, side = hi, "upper"
		} else {
			r.CILow = lo
		}
		r.Notes = append(r.Notes, fmt.Sprintf("the interval's %s end at %.2f %%: the best of %d alternatives was chosen on these pairs (Bonferroni)", side, 100*wide, k))
	}
	if len(r.Values) < 2 { // no interval from one pair (results.json holds no infinity)
		r.CILow, r.CIHigh = 0, 0
		r.Notes = append(r.Notes, "one pair: no interval")
	}
	if widened {
		r.Notes = append(r.Notes, "interval at the A/A control's per-pair spread, wider than the comparison's own")
	}
	r.Margin = judge.AAMargin(aa)
	if why := unstable(aa, level); why != "" {
		r.Verdict = ""
		r.NotJudged = why
		return
	}
	r.Verdict = Inconclusive
	if len(r.Values) >= 2 {
		r.Verdict = judge.ThreeWay(r.CILow, r.CIHigh, r.Margin, c.higher)
	}
	boundedVerdict(r, *c)
	if r.Verdict == Inconclusive {
		r.PairsToDecide = pairsToDecide(r.Values, spread, len(c.against), r.Margin)
	}
}

// maxPairsToDecide caps pairsToDecide: beyond it the answer is "more".
const maxPairsToDecide = 1000

// pairsToDecide is about how many pairs, looked at once, an inconclusive
// comparison would need for its interval to clear the margin band or fit
// inside it: its per-pair spread in logs (pooled with the A/A control's,
// aa, when wider, as judge.ComparisonInterval does) and the distance d of its
// estimate from the band's nearer edge give the fewest pairs, more than
// it has, whose t interval at 1 - 0.025/k for k alternatives (the
// Bonferroni end) is narrower than d. 0 with fewer than two ratios; an
// estimate on the edge, or a need past it, gives maxPairsToDecide.
func pairsToDecide(ratios, aa []float64, k int, margin float64) int {
	n := len(ratios)
	if n < 2 {
		return 0
	}
	mean, sd := judge.LogMeanSpread(ratios)
	if len(aa) >= 2 {
		sd = max(sd, judge.PooledSpread(sd, n, aa))
	}
	d := math.Abs(math.Abs(mean) - math.Log(1+margin))
	if d == 0 {
		return maxPairsToDecide
	}
	// From the normal approximation up, the first count past the pairs
	// run whose t interval (at the deciding end's level) is narrower than
	// d: at a few pairs t is far wider than z.
	p := 1 - 0.025/float64(max(k, 1))
	narrow := func(pairs int) bool { // the t interval of pairs pairs is narrower than d
		t := judge.TQuantile(p, pairs-1)
		return t*sd/math.Sqrt(float64(pairs)) < d
	}
	lo := max(n+1, int(min(math.Ceil(math.Pow(distuv.UnitNormal.Quantile(p)*sd/d, 2)), maxPairsToDecide)))
	if lo >= maxPairsToDecide || !narrow(maxPairsToDecide) {
		return maxPairsToDecide
	}
	hi := maxPairsToDecide // narrow(hi); the width falls as pairs grow: bisect
	for lo < hi {
		if mid := (lo + hi) / 2; narrow(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// unansweredBounds notes, for each variant in names, the pairs idx in
// which it left more than 1 % of its requests unanswered: there its p99 of
// all requests is beyond every answer and p99OfAll gives the slowest
// answer, a lower bound (boundedVerdict then keeps only the verdict that
// bound supports: shedding more never reads as a lower p99).
func unansweredBounds(s *Scenario, names []string, idx []int) []string {
	var notes []string
	for _, name := range names {
		v := s.variant(name)
		if v == nil {
			continue
		}
		var in []string
		for _, i := range idx {
			if i < len(v.Repeats) {
				if u, ok := metricOf(v.Repeats[i], "unanswered_share"); ok && u >= 0.01 {
					in = append(in, fmt.Sprint(i+1))
				}
			}
		}
		if len(in) > 0 {
			notes = append(notes, fmt.Sprintf("%s left over 1 %% unanswered in pair %s: its p99 of all there is its slowest answer, a lower bound", name, strings.Join(in, ", ")))
		}
	}
	return notes
}

// boundedVerdict keeps only the verdict a bound supports. A derived value
// (capacityCheck) that is a bound makes the ratio one too. A bound on the
// side of better (a lower bound when higher is better, an upper bound
// when lower is) says the true value may be better than measured; one on
// the side of worse, that it may be worse. The judged variant's bound on
// the side of better leaves the true ratio at least as good as measured,
// which supports "better" only; on the side of worse, "worse" only. Any
// alternative's bound on the side of better may make it the true best,
// above the best measured: "worse" only. A bound on the side of worse
// matters for the best alternative alone (it may be worse than measured:
// "better" only); another alternative's true value is then below the
// best's already and changes nothing. Any other verdict becomes
// inconclusive, with a note. The A/A control's bounds are not in the
// ratio and change nothing.
func boundedVerdict(r *CheckResult, c check) {
	betterSide, worseSide := "a lower bound", "an upper bound"
	if !c.higher {
		betterSide, worseSide = worseSide, betterSide
	}
	var atLeast, atMost bool // the true ratio is at least (at most) as good as measured
	for _, n := range r.Notes {
		base, _, _ := strings.Cut(n, " ")
		judged, alt := base == c.judged, slices.Contains(c.against, base)
		switch {
		case !judged && !alt: // the A/A control's bound: not in the ratio
		case judged && strings.HasSuffix(n, betterSide):
			atLeast = true
		case judged && strings.HasSuffix(n, worseSide):
			atMost = true
		case strings.HasSuffix(n, betterSide): // an alternative that may be the true best
			atMost = true
		case strings.HasSuffix(n, worseSide) && base == r.BestAlternative:
			atLeast = true
		}
	}
	keep := r.Verdict
	switch {
	case atLeast && atMost:
		keep = Inconclusive
	case atLeast && r.Verdict != Better:
		keep = Inconclusive
	case atMost && r.Verdict != Worse:
		keep = Inconclusive
	}
	if keep != r.Verdict {
		r.Notes = append(r.Notes, fmt.Sprintf("%s not supported: a bound stands for a value, so the ratio is a bound too", r.Verdict))
		r.Verdict = keep
	}
}

// variantValid reports whether s has a valid variant name.
func variantValid(s *Scenario, name string) bool {
	v := s.variant(name)
	return v != nil && v.Valid
}

// geomean is the geometric mean of positive xs (NaN for none).
func geomean(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	var sum float64
	for _, x := range xs {
		sum += math.Log(x)
	}
	return math.Exp(sum / float64(len(xs)))
}

// notJudgedRepeat reports whether repeat i of any of names is left out
// (Repeat.NotJudged).
func notJudgedRepeat(s *Scenario, names []string, i int) bool {
	for _, name := range names {
		if v := s.variant(name); v != nil && i < len(v.Repeats) && v.Repeats[i].NotJudged != "" {
			return true
		}
	}
	return false
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// metricOf reads a per-repeat figure.
func metricOf(rp Repeat, metric string) (float64, bool) {
	switch metric {
	case "p50":
		return rp.P50, true
	case "p90":
		return rp.P90, true
	case "p99":
		return rp.P99, true
	case "p999":
		return rp.P999, true
	case "mean":
		return rp.Mean, true
	case "max":
		return rp.Max, true
	case "throughput":
		return rp.ThroughputPS, true
	}
	x, ok := rp.Extra[metric]
	return x, ok
}

// line is the check in one sentence: a comparison's verdict with its
// estimate, interval, margin, pairs and best alternative; a figure's
// value with its range, goal and floor.
func (r CheckResult) line() string {
	if r.NotJudged != "" {
		return fmt.Sprintf("%s: not judged (%s)", r.Label, r.NotJudged)
	}
	var b strings.Builder
	switch {
	case r.Kind == "comparison" && r.Verdict == "":
		fmt.Fprintf(&b, "%s: no verdict (smoke test) — %s %.2fx %s, %d pair(s)", r.Label, r.Judged, r.Estimate, r.BestAlternative, r.Pairs)
	case r.Kind == "comparison":
		verdict := string(r.Verdict)
		interval := fmt.Sprintf("[%s CI %.2f-%.2fx]", levelText(r.Level), r.CILow, r.CIHigh)
		if r.CILow == 0 && r.CIHigh == 0 {
			interval = "[no interval]"
		}
		fmt.Fprintf(&b, "%s: %s — %s %.2fx %s %s, margin ±%.0f%% from the A/A control, %d pairs",
			r.Label, verdict, r.Judged, r.Estimate, r.BestAlternative, interval, 100*r.Margin, r.Pairs)
		if r.AAPairs > 0 {
			fmt.Fprintf(&b, " (A/A %.2fx [%.2f-%.2fx])", r.AAEstimate, r.AACILow, r.AACIHigh)
		}
		if r.Goal > 0 {
			fmt.Fprintf(&b, "; the claim's ratio %s %.2fx", map[bool]string{true: ">=", false: "<="}[r.HigherIsBetter], r.Goal)
		}
	case len(r.Against) > 0: // a ratio figure
		fmt.Fprintf(&b, "%s: figure %s %.2fx %s %s", r.Label, r.Judged, r.Estimate, r.Against[0], perRepeat(r.Values, "x"))
		if r.Goal > 0 {
			fmt.Fprintf(&b, " (goal %s %.2fx)", map[bool]string{true: ">=", false: "<="}[r.HigherIsBetter], r.Goal)
		}
	default:
		fmt.Fprintf(&b, "%s: figure %s %s %s", r.Label, r.Judged, fmtValue(median(r.Values), r.Metric, r.Unit), perRepeatValues(r.Values, r.Metric, r.Unit))
		if r.Goal > 0 {
			fmt.Fprintf(&b, " (goal %s %s)", map[bool]string{true: ">=", false: "<="}[r.HigherIsBetter], fmtValue(r.Goal, r.Metric, r.Unit))
		}
		if r.FloorName != "" {
			fmt.Fprintf(&b, " (floor: %s %s)", r.FloorName, fmtValue(r.Floor, r.Metric, r.Unit))
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, " [%s]", n)
	}
	return b.String()
}

// medianIndex is the index of the median element of xs (the lower one of
// an even count).
func medianIndex(xs []float64) int {
	idx := make([]int, len(xs))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int {
		switch {
		case xs[a] < xs[b]:
			return -1
		case xs[a] > xs[b]:
			return 1
		}
		return 0
	})
	return idx[(len(idx)-1)/2]
}

func perRepeat(xs []float64, suffix string) string {
	var parts []string
	for _, x := range xs {
		parts = append(parts, fmt.Sprintf("%.2f%s", x, suffix))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func perRepeatValues(xs []float64, metric, unit string) string {
	var parts []string
	for _, x := range xs {
		parts = append(parts, fmtValue(x, metric, unit))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// fmtValue prints a metric's value in its unit: latencies (in seconds)
// as ms, shares as %, rates as /s.
func fmtValue(x float64, metric, unit string) string {
	if unit == "" {
		switch {
		case metric == "throughput", strings.HasSuffix(metric, "_per_s"):
			unit = "/s"
		case strings.HasSuffix(metric, "_share") || strings.HasPrefix(metric, "share") || strings.HasSuffix(metric, "_used") || strings.Contains(metric, "_share_"):
			unit = "%"
		case strings.HasPrefix(metric, "p") || metric == "mean" || metric == "max" || strings.HasSuffix(metric, "_s"):
			unit = "s"
		}
	}
	switch unit {
	case "s":
		return ms(x)
	case "%":
		return fmt.Sprintf("%.1f%%", x*100)
	case "/s":
		return fmt.Sprintf("%.0f/s", x)
	case "x":
		return fmt.Sprintf("%.2fx", x)
	}
	return fmt.Sprintf("%.3g", x)
}

// levelText prints a confidence level as "95%" or "97.8%" (0: 95%).
func levelText(level float64) string {
	if level == 0 {
		level = judge.Confidence
	}
	return strings.TrimSuffix(strconv.FormatFloat(100*level, 'f', 1, 64), ".0") + "%"
}

// unstable says why an A/A control gives no margin, or "": unstable at
// the look's level (judge.UnstableControl), or showing at 95 %, the
// level its margin is computed at, a bias beyond the margin's floor —
// which would otherwise widen the margin instead of stopping the
// verdict (bench.md: such a control is not judged).
func unstable(aa []float64, level float64) string {
	if why := judge.UnstableControl(aa, level); why != "" {
		return why
	}
	if m := judge.AAMargin(aa); m > judge.MarginFloor {
		est, lo, hi := judge.PairedInterval(aa, judge.Confidence)
		return fmt.Sprintf("unstable control: the A/A control differs from itself by %.2fx [%.2f-%.2f] at 95 %%, beyond the %.0f %% floor", est, lo, hi, 100*judge.MarginFloor)
	}
	return ""
}

// zeroLoss judges a comparison in which the judged variant did nothing
// (a zero of a higher-is-better metric: no batch work done, nothing
// served) in a pair where an alternative did some: no ratio can be
// formed there, and dropping the pair would hide a loss. It is judged on
// the totals over the pairs instead, against the alternative with the
// largest total (a geometric mean is 0 with one zero): worse when the
// judged variant's total is under 1/(1+floor) of it, else inconclusive,
// with both totals and the zero pairs said. ok is false when no pair has
// such a zero (the ratios then judge as usual).
func zeroLoss(r *CheckResult, c check, idx []int, vals map[string][]float64) (CheckResult, bool) {
	if !c.higher {
		return CheckResult{}, false
	}
	best, sb := "", 0.0
	for _, a := range c.against {
		var t float64
		for _, x := range vals[a] {
			t += x
		}
		if t > sb {
			best, sb = a, t
		}
	}
	var zeros []string
	var sj float64
	for k, jv := range r.JudgedValues {
		sj += jv
		if jv <= 0 && best != "" && vals[best][k] > 0 {
			zeros = append(zeros, strconv.Itoa(idx[k]+1))
		}
	}
	if len(zeros) == 0 {
		return CheckResult{}, false
	}
	out := *r
	out.BestAlternative, out.BestValues = best, vals[best]
	out.Estimate = sj / sb
	out.Margin = judge.MarginFloor
	out.Verdict = Inconclusive
	if out.Estimate < 1/(1+judge.MarginFloor) {
		out.Verdict = Worse
	}
	out.Notes = append(out.Notes, fmt.Sprintf("%s did none in pair %s of %d, where %s did some: judged on the totals over the pairs, %s against %s",
		c.judged, strings.Join(zeros, ", "), len(idx), best,
		fmtValue(sj, c.metric, c.unit), fmtValue(sb, c.metric, c.unit)))
	return out, true
}
