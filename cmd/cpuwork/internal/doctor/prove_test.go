package doctor

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cpuwork/cpuwork/budget"
	"github.com/cpuwork/cpuwork/cgroup"
	"github.com/cpuwork/cpuwork/cmd/cpuwork/internal/judge"
)

// The refusals of --prove: no command, a command that exits at once, a
// healthy program (nothing to prove), a fix that needs code.
func TestProveRefusals(t *testing.T) {
	if _, err := Prove(ProveConfig{}); err == nil || !strings.Contains(err.Error(), "needs a command") {
		t.Errorf("no command: %v", err)
	}
	if _, err := Prove(ProveConfig{Cmd: []string{"no-such-command-here"}}); err == nil {
		t.Error("a command that does not exist: no error")
	}
	_, err := Prove(ProveConfig{Cmd: []string{"true"}, Settle: 200 * time.Millisecond})
	if !errors.Is(err, ErrExitedAtOnce) {
		t.Errorf("a command that exits at once: %v, want ErrExitedAtOnce", err)
	}
	for _, c := range []struct {
		res  *Result
		want string
	}{
		{&Result{Findings: []Finding{{ID: "healthy", Severity: Info}}}, "nothing to prove"},
		{&Result{Findings: []Finding{{ID: "nothing-found-os-view", Severity: Partial}}}, "nothing to prove"},
		{&Result{Findings: []Finding{{ID: "inconclusive", Severity: Inconclusive}}}, "inconclusive"},
		{&Result{Findings: []Finding{{ID: "timer-starvation", Severity: Warning, Fix: "call cpuwork.Checkpoint"}}}, "needs a change in the code"},
		{func() *Result {
			r := &Result{Findings: []Finding{{ID: "cpu-throttled", Severity: Warning}}}
			r.Window.Budget, r.Window.GOMAXPROCS, r.Window.Go.GoVersion = budget.Budget{Cores: 2}, 2, "go1.26"
			return r
		}(), "no setting from outside"},
	} {
		if fix, why := fixFor(c.res); fix != nil || !strings.Contains(why, c.want) {
			t.Errorf("%s: fix %v, refusal %q; want none and %q", c.res.Findings[0].ID, fix, why, c.want)
		}
	}
	r := &Result{Findings: []Finding{{ID: "gomaxprocs-above-quota", Severity: Critical}}}
	r.Window.Budget, r.Window.GOMAXPROCS, r.Window.Go.GoVersion = budget.Budget{Cores: 1.5}, 4, "go1.26"
	if fix, _ := fixFor(r); fix == nil || len(fix.Env) != 1 || fix.Env[0] != "GOMAXPROCS=1" {
		t.Errorf("GOMAXPROCS 4 under a 1.5-core quota: fix %+v, want GOMAXPROCS=1", fix)
	}
}

// A healthy program: nothing to prove, after one diagnosis.
func TestProveOnAHealthyProgramHasNothingToProve(t *testing.T) {
	t.Setenv("DOCTOR_ILL", "light")
	p, err := Prove(ProveConfig{Cmd: []string{os.Args[0], "-test.run=^$"}, Settle: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if p.Fix != nil || !strings.Contains(p.Refusal, "nothing to prove") {
		t.Errorf("fix %+v, refusal %q", p.Fix, p.Refusal)
	}
}

// quotaGroup makes a 1-CPU cgroup for the test's command (skipping the
// test where it cannot), removed when the test ends.
func quotaGroup(t *testing.T) *cgroup.Group {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a cgroup with a CPU quota")
	}
	g, err := cgroup.New(cgroup.Config{Name: cgroup.OwnedName("doctor-prove"), Parent: "cpuwork-doctor-test", CPUs: 1})
	if err != nil {
		t.Skipf("cannot create a CPU cgroup here: %v", err)
	}
	t.Cleanup(func() {
		if err := g.Remove(); err != nil {
			t.Error(err)
		}
	})
	return g
}

// proveBusy proves a program of four busy loops with GOMAXPROCS 4 in a
// 1-CPU cgroup, in 3 rounds of windows of d, with the load command load
// ("": none); it returns the proof and its text (logged).
func proveBusy(t *testing.T, load string, d time.Duration) (*Proof, string) {
	t.Helper()
	g := quotaGroup(t)
	t.Setenv("DOCTOR_ILL", "busy:4")
	t.Setenv("GOMAXPROCS", "4")
	p, err := Prove(ProveConfig{Cmd: []string{os.Args[0], "-test.run=^$"}, Load: load, Pairs: 3, Duration: d,
		Settle: 300 * time.Millisecond, started: g.Add})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	p.Text(&b)
	t.Log("\n" + b.String())
	return p, b.String()
}

// GOMAXPROCS 4 in a 1-CPU cgroup: the fix (GOMAXPROCS=1 in the
// environment) removes the throttling and lowers the run delay, and the
// proof says better.
func TestProveGOMAXPROCSAboveAQuota(t *testing.T) {
	p, text := proveBusy(t, "", time.Second)
	if p.Fix == nil || p.Fix.Env[0] != "GOMAXPROCS=1" {
		t.Fatalf("fix %+v (refusal %q), want GOMAXPROCS=1", p.Fix, p.Refusal)
	}
	// The run delay of four threads on one core's quota goes with the
	// fix whatever else runs. How much the quota throttles depends on
	// the CPUs the rest of the machine leaves the process (beside go
	// test's other packages, four threads may not get two CPUs at
	// once): the throttling figures must never be worse, and are better
	// on a quiet machine (docs/raw/doctor-prove-2026-11-28.txt).
	for _, f := range p.Figures {
		if f.Name == "run delay" && f.Verdict != judge.Better || f.Verdict == judge.Worse {
			t.Errorf("%s: %s", f.Name, f.Verdict)
		}
	}
	// Without --load or --url nothing says what the users feel: no
	// verdict, and the text says why.
	if p.Verdict != "" || !strings.Contains(text, "no verdict: without --load or --url") {
		t.Errorf("verdict %q without a load: want none, said", p.Verdict)
	}
}

// provedWithLoad proves GOMAXPROCS 4 in a 1-CPU cgroup with a load whose
// p99 the fix multiplies by factor: the fake load reads whether its
// target runs with the fix (GOMAXPROCS=1 in its environment, through
// $CPUWORK_TARGET_PID) and prints a JSON line with p99_ms (about 100 ms
// as is, with a few percent of noise), and records the cgroup it ran in.
func provedWithLoad(t *testing.T, factor string) (*Proof, string) {
	t.Helper()
	where := filepath.Join(t.TempDir(), "where")
	load := fmt.Sprintf(`cat /proc/self/cgroup >> %s
if tr '\0' '\n' < /proc/$CPUWORK_TARGET_PID/environ | grep -qx GOMAXPROCS=1; then f=%s; else f=1; fi
n=$(od -An -N2 -tu2 /dev/urandom | tr -d ' ')
awk -v f=$f -v n=$n 'BEGIN { printf "{\"p99_ms\": %%.3f, \"rps\": 50}\n", 100 * f * (1 + n / 65536 / 20) }'`, where, factor)
	p, _ := proveBusy(t, load, 500*time.Millisecond)
	ran, _ := os.ReadFile(where)
	return p, string(ran)
}

// A fix that makes the load's latency worse is worse, whatever the
// throttling says (it falls with GOMAXPROCS=1 either way); and the load
// runs outside the program's cgroup.
func TestProveCallsAFixThatWorsensTheLoadWorse(t *testing.T) {
	p, ran := provedWithLoad(t, "2")
	if p.Verdict != judge.Worse {
		t.Errorf("the load's p99 doubled by the fix: verdict %q, want worse", p.Verdict)
	}
	if strings.Contains(ran, "cpuwork-doctor-test") || !strings.Contains(ran, "prove-load") {
		t.Errorf("the load ran in\n%s\nwant its own cgroup (prove-load), outside the program's (cpuwork-doctor-test)", ran)
	}
	if !strings.Contains(p.LoadWhere, "outside the program's cgroup") {
		t.Errorf("LoadWhere %q", p.LoadWhere)
	}
}

// A fix that improves the load's latency is better.
func TestProveCallsAFixThatImprovesTheLoadBetter(t *testing.T) {
	if p, _ := provedWithLoad(t, "0.5"); p.Verdict != judge.Better {
		t.Errorf("the load's p99 halved by the fix: verdict %q, want better", p.Verdict)
	}
}

// The verdict rests on the felt figures: any worse makes it worse; else
// the first one's; none: no verdict.
func TestTheVerdictRestsOnWhatTheUsersFeel(t *testing.T) {
	f := func(name string, felt bool, v judge.Verdict) Figure {
		return Figure{Name: name, Felt: felt, Verdict: v}
	}
	for _, c := range []struct {
		figs []Figure
		want judge.Verdict
	}{
		{[]Figure{f("throttled time", false, judge.Better), f("load p99", true, judge.Worse)}, judge.Worse},
		{[]Figure{f("throttled time", false, judge.Better), f("load p99", true, judge.Inconclusive)}, judge.Inconclusive},
		{[]Figure{f("load p99", true, judge.Better), f("load throughput", true, judge.Worse)}, judge.Worse},
		{[]Figure{f("load p99", true, judge.Better), f("load throughput", true, judge.Equivalent)}, judge.Better},
		{[]Figure{f("throttled time", false, judge.Worse)}, ""},
	} {
		if got, _ := feltVerdict(c.figs); got != c.want {
			t.Errorf("%+v: %q, want %q", c.figs, got, c.want)
		}
	}
}

// A command that sets the fix's variable itself would override it.
func TestAFixTheCommandOverridesIsNotProved(t *testing.T) {
	if k := setsItself([]string{"env", "GOMAXPROCS=4", "./server"}, []string{"GOMAXPROCS=1"}); k != "GOMAXPROCS" {
		t.Errorf("env GOMAXPROCS=4 ./server: %q", k)
	}
	if k := setsItself([]string{"./server", "GOMAXPROCS=4"}, []string{"GOMAXPROCS=1"}); k != "" {
		t.Errorf("an argument of the program: %q", k)
	}
}

func TestParseLoadP99(t *testing.T) {
	for _, c := range []struct {
		out  string
		want float64
	}{
		{"Latency distribution:\n  10% in 0.0011 secs\n  99% in 0.0123 secs\n", 12.3},
		{"Requests      [total, rate, throughput]  150, 50.33, 50.30\nLatencies     [min, mean, 50, 90, 95, 99, max]  1.1ms, 2ms, 1.9ms, 3ms, 3.5ms, 5.5ms, 9ms\n", 5.5},
		{`{"latencies":{"total":1,"mean":2,"50th":3,"90th":4,"95th":5,"99th":7000000,"max":8}}` + "\n", 7},
		{"warming up\n{\"p99_ms\": 42.5}\n", 42.5},
	} {
		if got := parseLoadP99(c.out); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("%q: %v, want %v", c.out, got, c.want)
		}
	}
	if got := parseLoadP99("no latency here"); !math.IsNaN(got) {
		t.Errorf("no latency: %v, want NaN", got)
	}
}
