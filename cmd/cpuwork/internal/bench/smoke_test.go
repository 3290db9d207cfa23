package bench

import (
	"bytes"
	"strings"
	"testing"
)

// A smoke test holds no figure to its goal: a figure past its goal is
// marked "goal not judged: smoke test", so that a newcomer does not read
// a miss; a variant with no baseline in its case shows "-", not 0.000x.
func TestASmokeTestSaysItsGoalsAreNotJudged(t *testing.T) {
	s := synth(map[string]map[string][]float64{"cpuwork": {"p99": {0.006}}})
	s.smoke = true
	judgeChecks(s, []check{{label: "alone: critical p99 (goal)", judged: "cpuwork", metric: "p99", limit: 0.001}})
	if l := s.Checks[0].line(); !strings.Contains(l, "goal not judged: smoke test") {
		t.Errorf("a smoke test's goal line: %q", l)
	}
	s.Baseline = "naive"
	var b bytes.Buffer
	WriteScenario(&b, s)
	if !strings.Contains(b.String(), "cpuwork") || strings.Contains(b.String(), "0.000x") {
		t.Errorf("a variant with no baseline printed 0.000x:\n%s", b.String())
	}
}

// Every name the tables use that README does not define is in the
// legend printed before them.
func TestTheLegendNamesWhatTheTablesUse(t *testing.T) {
	for _, w := range []string{"-aa", "+nice0", "+quota1.5", "@200%", "C1-C5", "goal", "goodput", "p99 of all", "gen. late p99", "floor", "Bonferroni"} {
		if !strings.Contains(Legend, w) {
			t.Errorf("the legend does not say what %q means", w)
		}
	}
}
