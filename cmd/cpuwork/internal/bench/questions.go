package bench

import (
	_ "embed"
	"fmt"
	"io"
	"strings"
)

// questionsText is the checked-in list of the default run's questions.
//
//go:embed questions.txt
var questionsText string

// declared is one question of questionsText: a scenario's comparison by
// its label.
type declared struct{ scenario, label string }

// skipped is one thing questionsText says the default run does not ask,
// and what asks it.
type skipped struct{ what, how string }

// parseQuestions reads questionsText's format: "ask<TAB>scenario<TAB>label"
// and "skip<TAB>what<TAB>how" lines, "#" comments and blank lines.
func parseQuestions(text string) (asks []declared, skips []skipped, err error) {
	for i, line := range strings.Split(text, "\n") {
		if line = strings.TrimRight(line, "\r"); line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Split(line, "\t")
		switch {
		case len(f) == 3 && f[0] == "ask" && f[1] != "" && f[2] != "":
			asks = append(asks, declared{f[1], f[2]})
		case len(f) == 3 && f[0] == "skip" && f[1] != "" && f[2] != "":
			skips = append(skips, skipped{f[1], f[2]})
		default:
			return nil, nil, fmt.Errorf("questions line %d: want ask|skip, then two tab-separated fields: %q", i+1, line)
		}
	}
	return asks, skips, nil
}

// questions is the parsed list; the package's tests parse it, so a
// malformed list never ships.
var questions, notAsked, _ = parseQuestions(questionsText)

// matches reports whether a check's label answers question q: the same
// label, or the label going on with ": " (a figure of the run, such as
// the objective's value, after the question).
func (q declared) matches(label string) bool {
	return label == q.label || strings.HasPrefix(label, q.label+": ") || strings.HasPrefix(label, q.label+" (")
}

// Answer is what a run says of one declared question, as results.json
// records it.
type Answer struct {
	Scenario string `json:"scenario"`
	Question string `json:"question"`
	// Verdict is better, equivalent or worse when decided, inconclusive
	// when this run could not tell, "" when the question was not asked
	// or not judged (Why says which and why).
	Verdict Verdict `json:"verdict,omitempty"`
	Why     string  `json:"why,omitempty"`
	// PairsToDecide, for an inconclusive answer: about how many pairs
	// would decide it at the run's spread (maxPairsToDecide: more than
	// this machine can run).
	PairsToDecide int `json:"pairs_to_decide,omitempty"`
	// Line is the comparison as the scenario's verdict prints it.
	Line string `json:"line,omitempty"`
}

// answer reports the declared questions of the scenarios a run ran, in
// the list's order: each with its comparison's verdict, or why it has
// none. A scenario the run did not include asks nothing.
func answer(rep *Report) []Answer {
	var out []Answer
	for _, q := range questions {
		var s *Scenario
		for _, sc := range rep.Scenarios {
			if sc.Name == q.scenario {
				s = sc
			}
		}
		if s == nil {
			continue
		}
		a := Answer{Scenario: q.scenario, Question: q.label}
		var c *CheckResult
		for i := range s.Checks {
			if s.Checks[i].Kind == "comparison" && q.matches(s.Checks[i].Label) {
				c = &s.Checks[i]
				break
			}
		}
		switch {
		case s.Skipped != "":
			a.Why = "not asked: the scenario was skipped: " + s.Skipped
		case c == nil:
			a.Why = "not asked: the scenario declared no such comparison in this run (a bug when the run is the default run)"
		case c.NotJudged != "":
			a.Why, a.Line = "not judged: "+c.NotJudged, c.line()
		case c.Verdict == "":
			a.Why, a.Line = "no verdict: smoke test", c.line()
		default:
			a.Verdict, a.Line, a.PairsToDecide = c.Verdict, c.line(), c.PairsToDecide
			if c.Verdict == Inconclusive {
				a.Why = cannotTell(s, c.PairsToDecide)
			}
		}
		out = append(out, a)
	}
	return out
}

// cannotTell says how far an inconclusive comparison of s is from a
// decision: the pairs at the run's spread and the minutes they take here.
func cannotTell(s *Scenario, pairs int) string {
	switch {
	case pairs >= maxPairsToDecide:
		return "cannot tell here: more than 1,000 pairs at this run's spread"
	case pairs > 0:
		return fmt.Sprintf("cannot tell here in this run: about %d pairs%s (--thorough runs up to %d)", pairs, pairsTime(s, pairs, " / %s"), thoroughMaxPairs)
	}
	return "cannot tell here in this run"
}

// writeAnswers prints the run's answers to the declared questions: the
// count of each verdict over all of them (the denominator counts every
// question, asked or not), then one line per question.
func writeAnswers(w io.Writer, rep *Report) {
	if len(rep.Answers) == 0 {
		return
	}
	count := map[string]int{}
	for _, a := range rep.Answers {
		switch {
		case a.Verdict == Inconclusive:
			count["cannot tell here in this run"]++
		case a.Verdict != "":
			count[string(a.Verdict)]++
		case strings.HasPrefix(a.Why, "not asked"):
			count["not asked"]++
		default:
			count["not judged"]++
		}
	}
	var parts []string
	for _, k := range []string{"better", "equivalent", "worse", "cannot tell here in this run", "not judged", "not asked"} {
		if count[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, count[k]))
		}
	}
	decided := count["better"] + count["equivalent"] + count["worse"]
	fmt.Fprintf(w, "\n== the declared questions (docs/bench.md#the-declared-questions): %d of %d decided: %s ==\n", decided, len(rep.Answers), strings.Join(parts, ", "))
	for _, a := range rep.Answers {
		v := string(a.Verdict)
		switch {
		case a.Verdict == Inconclusive:
			v = a.Why
		case a.Verdict == "":
			v = a.Why
		}
		fmt.Fprintf(w, "%-10s %s: %s\n", a.Scenario, a.Question, v)
	}
}

// FirstScreen is what the default run says before it starts: the
// questions it asks and what it leaves out for its time, and what asks
// that ("" for any other run).
func FirstScreen(cfg Config) string {
	if !(cfg.Repeat == 0 && !cfg.Quick && !cfg.Thorough) {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "the default run asks %d declared questions (docs/bench.md#the-declared-questions) and answers each with a verdict or \"cannot tell here in this run\"; for its time it does not ask:\n", len(questions))
	for _, s := range notAsked {
		fmt.Fprintf(&b, "  - %s — asked by %s\n", s.what, s.how)
	}
	return b.String()
}
