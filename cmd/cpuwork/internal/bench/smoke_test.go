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
	judge(s, []check{{label: "alone: critical p99 (goal)", judged: "cpuwork", metric: "p99", limit: 0.001}})
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
