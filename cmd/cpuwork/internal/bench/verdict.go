package bench

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// The verdict engine. Every scenario declares its claim as checks (the
// variant judged — the one the docs tell a user to use for that workload —,
// the alternatives a user would pick instead, a metric and a limit); one
// function, judge, turns them into a status. Rules (docs/bench.md#verdicts):
//
//   - Paired repeats: repeat i of every variant ran in the same round, so
//     a check is decided per repeat, on the judged variant's value against
//     the best alternative's value in that same repeat.
//   - A repeat passes when every check passes in it. "holds" only when all
//     n repeats pass, "mixed" for 0 < k < n, "does not hold" for k = 0.
//   - A variant a check needs that is missing, skipped or invalid, or a
//     value that is not a finite measurement, makes the claim "not
//     judged" with the reason: never dropped, never judged on +Inf.

// Status is a claim's verdict in one word.
type Status string

const (
	StatusHolds     Status = "holds"
	StatusMixed     Status = "mixed"
	StatusFails     Status = "does not hold"
	StatusNotJudged Status = "not judged"
	StatusSkipped   Status = "skipped"
)

// check is one condition of a claim.
type check struct {
	label  string // what is compared, e.g. "alone: critical p99"
	judged string // the variant judged
	// against lists the alternatives: per repeat the best of them (lowest,
	// or highest with higher) is the comparator and the check is on the
	// ratio judged/best. Empty: the check is on the judged value itself.
	against []string
	metric  string // "p99", "mean", "p50", "p90", "p999", "max", "throughput", or a per-repeat Extra key
	higher  bool   // higher is better (throughput, shares): the limit is a minimum
	limit   float64
	unit    string // how values print with no alternatives: "s" (as ms), "%", "/s", "" (plain)
	// of, when set, replaces the metric lookup (a value derived from
	// several variants, like the capacity at a p99 target): it returns the
	// value of variant in repeat i, and note says how it was bounded.
	of func(s *Scenario, variant string, i int) (v float64, note string, err error)
	// needs, with of, lists the variants of derives from: each must be
	// valid with paired repeats (judged and against are then names of
	// of's, not variants).
	needs []string
}

// CheckResult is a check's outcome, as results.json records it.
type CheckResult struct {
	Label          string    `json:"label"`
	Judged         string    `json:"judged"`
	Against        []string  `json:"against,omitempty"`
	Metric         string    `json:"metric"`
	Limit          float64   `json:"limit"`
	HigherIsBetter bool      `json:"higher_is_better,omitempty"`
	JudgedValues   []float64 `json:"judged_values,omitempty"` // per repeat
	BestValues     []float64 `json:"best_values,omitempty"`   // per repeat, the best alternative's
	Best           []string  `json:"best,omitempty"`          // per repeat, which alternative was best
	Values         []float64 `json:"values,omitempty"`        // per repeat: the ratio judged/best, or the judged value with no alternatives
	Pass           []bool    `json:"pass,omitempty"`
	Notes          []string  `json:"notes,omitempty"` // bounds used (a variant that never met a target)
	Status         Status    `json:"status"`
	Reason         string    `json:"reason,omitempty"` // why not judged
	Unit           string    `json:"unit,omitempty"`
}

// judge evaluates checks against s's variants and sets s.Status,
// s.Checks, s.Agree/s.Of, s.Summary and s.Verdict. A scenario already
// skipped stays skipped.
func judge(s *Scenario, checks []check) {
	if s.Skipped != "" {
		s.Status = StatusSkipped
		return
	}
	s.Checks = nil
	n := -1
	var reasons []string
	for _, c := range checks {
		r := evaluate(s, c)
		s.Checks = append(s.Checks, r)
		if r.Status == StatusNotJudged {
			reasons = append(reasons, r.Reason)
			continue
		}
		if n == -1 || len(r.Pass) < n {
			n = len(r.Pass)
		}
	}
	if s.Calibration != "" {
		reasons = append(reasons, "calibration: "+s.Calibration)
	}
	switch {
	case len(checks) == 0:
		s.Status = StatusNotJudged
		reasons = append(reasons, "no checks declared")
	case len(reasons) > 0:
		s.Status = StatusNotJudged
	default:
		k := 0
		for i := range n {
			ok := true
			for _, r := range s.Checks {
				ok = ok && r.Pass[i]
			}
			if ok {
				k++
			}
		}
		s.Agree, s.Of = k, n
		switch {
		case n > 0 && k == n:
			s.Status = StatusHolds
		case k > 0:
			s.Status = StatusMixed
		default:
			s.Status = StatusFails
		}
	}
	var lines []string
	for _, r := range s.Checks {
		lines = append(lines, r.line())
	}
	if s.Status == StatusNotJudged {
		s.Verdict = "not judged: " + strings.Join(dedupe(reasons), "; ")
		if len(lines) > 0 {
			s.Verdict += ". Measured: " + strings.Join(lines, "; ")
		}
	} else {
		s.Verdict = fmt.Sprintf("%s in %d/%d paired repeats (a repeat passes when every check passes in it): %s", s.Status, s.Agree, s.Of, strings.Join(lines, "; "))
	}
	s.Summary = summaryLine(s)
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

// evaluate decides one check per paired repeat.
func evaluate(s *Scenario, c check) CheckResult {
	r := CheckResult{Label: c.label, Judged: c.judged, Against: c.against, Metric: c.metric, Limit: c.limit, HigherIsBetter: c.higher, Unit: c.unit}
	notJudged := func(format string, a ...any) CheckResult {
		r.Status, r.Reason = StatusNotJudged, fmt.Sprintf(format, a...)
		return r
	}
	names := append([]string{c.judged}, c.against...)
	if c.of != nil && len(c.needs) > 0 {
		names = c.needs
	}
	n := -1
	for _, name := range names {
		v := s.variant(name)
		switch {
		case v == nil:
			return notJudged("%s not measured", name)
		case !v.Valid:
			return notJudged("%s invalid: %s", name, v.Invalid)
		case len(v.Repeats) == 0:
			return notJudged("%s has no repeats", name)
		}
		if n != -1 && len(v.Repeats) != n {
			return notJudged("%s has %d repeats, %s %d: not paired", name, len(v.Repeats), names[0], n)
		}
		n = len(v.Repeats)
	}
	value := func(name string, i int) (float64, error) {
		if c.of != nil {
			x, note, err := c.of(s, name, i)
			if note != "" && !slices.Contains(r.Notes, note) {
				r.Notes = append(r.Notes, note)
			}
			return x, err
		}
		x, ok := metricOf(s.variant(name).Repeats[i], c.metric)
		if !ok {
			return 0, fmt.Errorf("%s repeat %d has no %s", name, i+1, c.metric)
		}
		return x, nil
	}
	for i := range n {
		if notJudgedRepeat(s, names, i) {
			// The reason is the scenario's note; the check names the repeat.
			r.Notes = append(r.Notes, fmt.Sprintf("repeat %d not judged", i+1))
			continue
		}
		jv, err := value(c.judged, i)
		if err != nil {
			return notJudged("%v", err)
		}
		if !finite(jv) {
			return notJudged("%s repeat %d: %s is %v, not a measurement", c.judged, i+1, c.metric, jv)
		}
		x := jv
		if len(c.against) > 0 {
			best, bestName := math.NaN(), ""
			for _, a := range c.against {
				av, err := value(a, i)
				if err != nil {
					return notJudged("%v", err)
				}
				if !finite(av) {
					return notJudged("%s repeat %d: %s is %v, not a measurement", a, i+1, c.metric, av)
				}
				if math.IsNaN(best) || (c.higher && av > best) || (!c.higher && av < best) {
					best, bestName = av, a
				}
			}
			if best <= 0 {
				return notJudged("%s repeat %d: %s is %v, no ratio to it", bestName, i+1, c.metric, best)
			}
			x = jv / best
			r.BestValues = append(r.BestValues, best)
			r.Best = append(r.Best, bestName)
		}
		r.JudgedValues = append(r.JudgedValues, jv)
		r.Values = append(r.Values, x)
		r.Pass = append(r.Pass, (c.higher && x >= c.limit) || (!c.higher && x <= c.limit))
	}
	k := 0
	for _, p := range r.Pass {
		if p {
			k++
		}
	}
	n = len(r.Pass)
	switch {
	case n == 0:
		return notJudged("no repeat judged (%s; the scenario's notes say why)", strings.Join(r.Notes, ", "))
	case k == n:
		r.Status = StatusHolds
	case k > 0:
		r.Status = StatusMixed
	default:
		r.Status = StatusFails
	}
	return r
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

// k counts the passing repeats.
func (r CheckResult) k() int {
	k := 0
	for _, p := range r.Pass {
		if p {
			k++
		}
	}
	return k
}

// line is the check in one sentence, with every repeat's value.
func (r CheckResult) line() string {
	if r.Status == StatusNotJudged {
		return fmt.Sprintf("%s: not judged (%s)", r.Label, r.Reason)
	}
	op := "<="
	if r.HigherIsBetter {
		op = ">="
	}
	var b strings.Builder
	if len(r.Against) > 0 {
		best := r.Best[medianIndex(r.Values)]
		vs := best
		if len(r.Against) > 1 {
			vs = "the best of " + strings.Join(r.Against, ", ") + " (" + best + " at the median)"
		}
		fmt.Fprintf(&b, "%s: %s %s vs %s %s = %.2fx %s (expected %s %.2fx)",
			r.Label, r.Judged, fmtValue(median(r.JudgedValues), r.Metric, r.Unit), vs, fmtValue(median(r.BestValues), r.Metric, r.Unit),
			median(r.Values), perRepeat(r.Values, "x"), op, r.Limit)
	} else {
		fmt.Fprintf(&b, "%s: %s %s %s (expected %s %s)", r.Label, r.Judged, fmtValue(median(r.Values), r.Metric, r.Unit),
			perRepeatValues(r.Values, r.Metric, r.Unit), op, fmtValue(r.Limit, r.Metric, r.Unit))
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, " [%s]", n)
	}
	fmt.Fprintf(&b, ": %s %d/%d", r.Status, r.k(), len(r.Pass))
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
	}
	return fmt.Sprintf("%.3g", x)
}

// summaryLine is the scenario in one line: the first check (the claim's
// key ratio against the best alternative), its per-repeat values and k/n.
func summaryLine(s *Scenario) string {
	if s.Status == StatusSkipped {
		return s.Skipped
	}
	if len(s.Checks) == 0 {
		return string(s.Status)
	}
	if s.Status == StatusNotJudged {
		return strings.Split(strings.TrimPrefix(s.Verdict, "not judged: "), ". Measured")[0]
	}
	line := fmt.Sprintf("%d/%d repeats pass all %d checks; key check %s", s.Agree, s.Of, len(s.Checks), checkLine(s.Checks[0]))
	// A verdict that fails on a later check names it: a passing key check
	// beside "does not hold" would read as a contradiction.
	worst, fewest := -1, passes(s.Checks[0])
	for i, r := range s.Checks[1:] {
		if p := passes(r); p < fewest {
			worst, fewest = i+1, p
		}
	}
	if worst >= 0 {
		r := s.Checks[worst]
		line += fmt.Sprintf("; fails most: %s (%d/%d)", checkLine(r), fewest, len(r.Pass))
	}
	return line
}

// passes counts the repeats in which r passed.
func passes(r CheckResult) int {
	n := 0
	for _, p := range r.Pass {
		if p {
			n++
		}
	}
	return n
}

// checkLine is one check: its median, per-repeat values and limit.
func checkLine(r CheckResult) string {
	if len(r.Against) > 0 {
		return fmt.Sprintf("%s: %s %.2fx %s %s (expected %s %.2fx)", r.Label, r.Judged, median(r.Values), r.Best[medianIndex(r.Values)], perRepeat(r.Values, "x"), map[bool]string{true: ">=", false: "<="}[r.HigherIsBetter], r.Limit)
	}
	return fmt.Sprintf("%s: %s %s %s (expected %s %s)", r.Label, r.Judged, fmtValue(median(r.Values), r.Metric, r.Unit), perRepeatValues(r.Values, r.Metric, r.Unit), map[bool]string{true: ">=", false: "<="}[r.HigherIsBetter], fmtValue(r.Limit, r.Metric, r.Unit))
}

// capacityAt returns a check's value function: the goodput at which the
// p99 of base's variants "base@N%" (one per load) reaches target, in
// repeat i, interpolated linearly in p99 between the highest load that met
// the target and the next one that did not. A variant that met it at every
// load is given its goodput at the highest (a lower bound); one that met it
// at none is given 0 when it is the judged variant and its goodput at the
// lowest load otherwise (an upper bound): a bound always in the
// comparator's favour, said in the check's notes.
func capacityAt(judged string, loads []float64, target float64) func(s *Scenario, base string, i int) (float64, string, error) {
	return func(s *Scenario, base string, i int) (float64, string, error) {
		type pt struct{ p99, goodput float64 }
		var pts []pt
		for _, l := range loads {
			v := s.variant(fmt.Sprintf("%s@%.0f%%", base, l*100))
			if v == nil || i >= len(v.Repeats) {
				return 0, "", fmt.Errorf("%s@%.0f%% repeat %d not measured", base, l*100, i+1)
			}
			rp := v.Repeats[i]
			pts = append(pts, pt{rp.P99, rp.Extra["goodput_per_s"]})
		}
		last := -1
		for k, p := range pts {
			if p.p99 > target {
				break
			}
			last = k
		}
		switch {
		case last == len(pts)-1:
			return pts[last].goodput, fmt.Sprintf("%s met the p99 target at every load: its goodput at the highest, a lower bound", base), nil
		case last == -1 && base == judged:
			return 0, fmt.Sprintf("%s never met the p99 target", base), nil
		case last == -1:
			return pts[0].goodput, fmt.Sprintf("%s never met the p99 target: its goodput at the lowest load, an upper bound", base), nil
		}
		a, b := pts[last], pts[last+1]
		f := (target - a.p99) / (b.p99 - a.p99)
		return a.goodput + f*(b.goodput-a.goodput), "", nil
	}
}
