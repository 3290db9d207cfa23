package bench

import (
	"slices"
	"strings"
	"testing"
)

// The checked-in list parses, names each question once, and names only
// scenarios of the default set.
func TestTheDeclaredQuestionsParse(t *testing.T) {
	asks, skips, err := parseQuestions(questionsText)
	if err != nil {
		t.Fatal(err)
	}
	if len(asks) == 0 || len(skips) == 0 {
		t.Fatalf("%d questions, %d skips: want both", len(asks), len(skips))
	}
	seen := map[declared]bool{}
	for _, q := range asks {
		if seen[q] {
			t.Errorf("%s: %q declared twice", q.scenario, q.label)
		}
		seen[q] = true
		i := slices.IndexFunc(scenarioTable, func(d scenarioDef) bool { return d.name == q.scenario })
		if i < 0 || scenarioTable[i].extra {
			t.Errorf("%s: not a scenario of the default run", q.scenario)
		}
	}
	if _, _, err := parseQuestions("ask\tservice\n"); err == nil {
		t.Error("a line with two fields parsed")
	}
}

// defaultRunChecks are the checks each scenario of the default run
// declares, built as the scenarios build them with the default run's
// configuration.
func defaultRunChecks() map[string][]check {
	r := &Runner{cfg: Config{}}
	quotas, _ := r.quotaLevels()
	return map[string][]check{
		"burst":      burstChecks(),
		"burst-long": burstChecks(),
		"priority":   priorityChecks(r.competitions()),
		"timers":     timerChecks(r.competitions()),
		"service":    serviceChecks(r.loadLevels(serviceLoads), 1),
		"inference":  inferenceChecks(r.loadLevels(inferenceLoads), 1, false, fractionalQuota()),
		"quota":      quotaChecks(quotas),
		"neighbour":  neighbourChecks(),
	}
}

// The default run asks exactly the declared questions: every one matches
// one comparison a scenario declares, and every comparison of the default
// run is a declared question — none added or dropped without the list.
func TestTheDefaultRunAsksExactlyTheDeclaredQuestions(t *testing.T) {
	checks := defaultRunChecks()
	for _, d := range scenarioTable {
		if _, ok := checks[d.name]; !ok && !d.extra {
			t.Errorf("scenario %s of the default run: its checks are not built here", d.name)
		}
	}
	for _, q := range questions {
		n := 0
		for _, c := range checks[q.scenario] {
			if !c.figure() && q.matches(c.label) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%s: %q matches %d comparisons of the default run, want 1", q.scenario, q.label, n)
		}
	}
	for sc, cs := range checks {
		for _, c := range cs {
			if !c.figure() && !slices.ContainsFunc(questions, func(q declared) bool { return q.scenario == sc && q.matches(c.label) }) {
				t.Errorf("%s: the default run compares %q, not a declared question", sc, c.label)
			}
		}
	}
}

// The summary answers every declared question of the scenarios run:
// decided ones with their verdict, undecided ones with the pairs and
// minutes that would decide them, the rest with why they were not asked,
// and the header counts all of them.
func TestTheSummaryAnswersEveryDeclaredQuestion(t *testing.T) {
	q := &Scenario{Name: "quota", Status: StatusBetter, Pairs: 6, DurationS: 60, Checks: []CheckResult{
		{Label: "0.25 CPUs: round p99", Kind: "comparison", Verdict: Better, Estimate: 0.5, CILow: 0.4, CIHigh: 0.6, Pairs: 6},
		{Label: "1.25 CPUs: round p99", Kind: "comparison", Verdict: Inconclusive, Estimate: 0.97, CILow: 0.8, CIHigh: 1.1, Pairs: 6, PairsToDecide: 30},
	}}
	nb := &Scenario{Name: "neighbour", Skipped: "needs root"}
	rep := &Report{Scenarios: []*Scenario{q, nb}}
	rep.Answers = answer(rep)
	var b strings.Builder
	writeAnswers(&b, rep)
	out := b.String()
	for _, want := range []string{
		"1 of 6 decided: better 1, cannot tell here in this run 1, not asked 4",
		"quota      0.25 CPUs: round p99: better",
		"quota      1.25 CPUs: round p99: cannot tell here in this run: about 30 pairs / 5 min",
		"quota      1.50 CPUs: round p99: not asked: the scenario declared no such comparison",
		"neighbour  heavy probe: mean: not asked: the scenario was skipped: needs root",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "burst") {
		t.Errorf("a scenario the run did not include is answered:\n%s", out)
	}
	if FirstScreen(Config{}) == "" || FirstScreen(Config{Thorough: true}) != "" {
		t.Error("the first screen names what the default run leaves out, and only in the default run")
	}
}
