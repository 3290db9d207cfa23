package doctor

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cpuwork/cpuwork/account"
	"github.com/cpuwork/cpuwork/budget"
	"github.com/cpuwork/cpuwork/schedstat"
)

// Every rule called directly with constructed windows, at and across each
// threshold (issue 22).

// quotaWindow is a 5 s window of an idle Go >= 1.25 process under a
// quota of q cores with GOMAXPROCS g, 50 periods, none throttled.
func quotaWindow(q float64, g int) *Window {
	return &Window{
		Duration:   5 * time.Second,
		Budget:     budget.Budget{Cores: q, Affinity: 2, Source: budget.SourceCgroupV2, SourceDir: "/q", CgroupDir: "/q", Limits: []budget.Limit{{Dir: "/q", Period: 100 * time.Millisecond, Cores: q, Leaf: true}}},
		GOMAXPROCS: g,
		Throttling: budget.Stat{Periods: 50},
		LimitDir:   "/q",
		CPUCores:   0.02,
	}
}

// plainWindow is a 5 s window of a process with a 2-core affinity budget.
func plainWindow() *Window {
	return &Window{Duration: 5 * time.Second, Budget: budget.Budget{Cores: 2, Affinity: 2, Source: budget.SourceAffinity}, GOMAXPROCS: 2, CPUCores: 0.5}
}

func find(fs []Finding, id string) (Finding, bool) {
	i := slices.IndexFunc(fs, func(f Finding) bool { return f.ID == id })
	if i < 0 {
		return Finding{}, false
	}
	return fs[i], true
}

func TestGOMAXPROCSAboveQuotaWarnsOnlyWhenItCosts(t *testing.T) {
	cases := []struct {
		name      string
		edit      func(w *Window)
		want      Severity // "" : no such finding
		throttled Severity
	}{
		{"idle under 1.5 CPUs (Go's max(2, ceil(q)) by design): info only", func(w *Window) {}, Info, ""},
		{"CPU demand just under 95 % of the quota: info", func(w *Window) { w.CPUCores = 0.949 * 1.5 }, Info, ""},
		{"CPU demand at 95 % of the quota: warning", func(w *Window) { w.CPUCores = 0.95 * 1.5 }, Warning, ""},
		{"5 % of 100 periods throttled: warning", func(w *Window) { w.Throttling = budget.Stat{Periods: 100, ThrottledPeriods: 5} }, Warning, Warning},
		{"4.9 % throttled: info", func(w *Window) { w.Throttling = budget.Stat{Periods: 1000, ThrottledPeriods: 49} }, Info, ""},
		{"25 % throttled: critical", func(w *Window) { w.Throttling = budget.Stat{Periods: 100, ThrottledPeriods: 25} }, Critical, Critical},
		{"1 of 1 period throttled: too few to judge", func(w *Window) { w.Throttling = budget.Stat{Periods: 1, ThrottledPeriods: 1} }, Info, ""},
		{"19 of 19: too few to judge", func(w *Window) { w.Throttling = budget.Stat{Periods: 19, ThrottledPeriods: 19} }, Info, ""},
		{"20 of 20: judged", func(w *Window) { w.Throttling = budget.Stat{Periods: 20, ThrottledPeriods: 20} }, Critical, Critical},
		{"GOMAXPROCS within the quota: nothing", func(w *Window) { w.GOMAXPROCS = 1 }, "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := quotaWindow(1.5, 2)
			c.edit(w)
			fs := diagnose(w)
			f, ok := find(fs, "gomaxprocs-above-quota")
			if (c.want == "") == ok || (ok && f.Severity != c.want) {
				t.Errorf("gomaxprocs-above-quota %v %q, want %q", ok, f.Severity, c.want)
			}
			thr, ok := find(fs, "cpu-throttled")
			if (c.throttled == "") == ok || (ok && thr.Severity != c.throttled) {
				t.Errorf("cpu-throttled %v %q, want %q", ok, thr.Severity, c.throttled)
			}
		})
	}
}

func TestAnAncestorQuotaSaysWhereAndWhoShares(t *testing.T) {
	w := quotaWindow(1, 2)
	w.Budget.CgroupDir = "/q/leaf"
	w.Budget.Limits[0].Leaf = false
	w.Siblings = 3
	w.Throttling = budget.Stat{Periods: 100, ThrottledPeriods: 30}
	f, ok := find(diagnose(w), "cpu-throttled")
	if !ok {
		t.Fatal("no cpu-throttled")
	}
	joined := ""
	for _, e := range f.Evidence {
		joined += e + "\n"
	}
	for _, want := range []string{"ancestor cgroup /q", "3 sibling cgroups"} {
		if !strings.Contains(joined, want) {
			t.Errorf("evidence lacks %q:\n%s", want, joined)
		}
	}
}

func TestRunDelayIsJudgedPerWakeUpAndAgainstTheBudget(t *testing.T) {
	mk := func(delay time.Duration, slices uint64, cpu, runnable float64) *Window {
		w := plainWindow()
		w.Kernel = schedstat.Threads{RunDelay: delay, OnCPU: 2 * time.Second, Timeslices: slices, Count: 10}
		w.CPUCores, w.RunnableThreads = cpu, runnable
		return w
	}
	cases := []struct {
		name string
		w    *Window
		want string
		sev  Severity
	}{
		// 0.1 s per second, 0.5 ms per wake-up: the thresholds.
		{"at both thresholds, below the budget: another process", mk(500*time.Millisecond, 1000, 1.0, 1), "os-starvation", Warning},
		{"per wake-up just under 0.5 ms", mk(500*time.Millisecond, 1001, 1.0, 1), "", ""},
		{"per second just under 0.1", mk(499*time.Millisecond, 998, 1.0, 1), "", ""},
		// An I/O server: 30 threads each waiting 100 µs per wake-up, 1.5 s
		// in all: 15 % of the budget, under the 20 % that is never healthy.
		{"many threads waiting 0.1 ms per wake-up, 15 % of the budget", mk(1500*time.Millisecond, 15000, 0.5, 0.2), "", ""},
		// The same waits adding up to 2.5 s: a quarter of the budget lost.
		{"many threads waiting 0.1 ms per wake-up, 25 % of the budget", mk(2500*time.Millisecond, 25000, 0.5, 0.2), "os-starvation", Warning},
		{"0.5 s per second and 2 ms per wake-up: critical", mk(2500*time.Millisecond, 1250, 1.0, 1), "os-starvation", Critical},
		{"at the budget with more runnable threads than cores: itself", mk(2500*time.Millisecond, 1250, 1.9, 8), "self-oversubscribed", Critical},
		{"at the budget but few runnable threads: another process", mk(2500*time.Millisecond, 1250, 1.9, 2), "os-starvation", Critical},
		{"below the budget with twice as many runnable threads as cores: itself", mk(2500*time.Millisecond, 1250, 1.6, 4), "self-oversubscribed", Critical},
		{"below the budget, 3.9 runnable threads on 2 cores: another process", mk(2500*time.Millisecond, 1250, 1.6, 3.9), "os-starvation", Critical},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fs := diagnose(c.w)
			_, starved := find(fs, "os-starvation")
			_, self := find(fs, "self-oversubscribed")
			switch c.want {
			case "":
				if starved || self {
					t.Errorf("findings %v, want neither", ids(&Result{Findings: fs}))
				}
			default:
				f, ok := find(fs, c.want)
				if !ok || f.Severity != c.sev {
					t.Errorf("findings %v, want %s %s", ids(&Result{Findings: fs}), c.want, c.sev)
				}
				if starved && self {
					t.Error("both os-starvation and self-oversubscribed")
				}
			}
		})
	}
	// Throttling explains run delay first.
	w := mk(2500*time.Millisecond, 1250, 1.0, 1)
	w.Budget = quotaWindow(1, 1).Budget
	w.Throttling = budget.Stat{Periods: 50, ThrottledPeriods: 40}
	if _, ok := find(diagnose(w), "os-starvation"); ok {
		t.Error("throttled run delay reported as starvation")
	}
}

func TestAtCapacityAndProbes(t *testing.T) {
	w := plainWindow()
	w.CPUCores = 0.9 * 2
	if _, ok := find(diagnose(w), "at-capacity"); !ok {
		t.Error("90 % of the budget for the whole window: no at-capacity")
	}
	w.CPUCores = 0.89 * 2
	if _, ok := find(diagnose(w), "at-capacity"); ok {
		t.Error("89 %: at-capacity")
	}
	slow := []time.Duration{5 * time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond, time.Millisecond, time.Millisecond}
	probeCases := []struct {
		p    Probes
		cpu  float64 // cores the process used (plainWindow's 0.5 when 0)
		want string
	}{
		{Probes{Sent: 5, Answered: 2, TimedOut: 3, Latency: []time.Duration{time.Second, time.Second}}, 0, "unresponsive"},
		{Probes{Sent: 4, Answered: 2, TimedOut: 2, Latency: []time.Duration{time.Millisecond, time.Millisecond}}, 0, "unresponsive"}, // half timed out
		{Probes{Sent: 5, Answered: 5, Latency: slow}, 2, "slow-to-answer"},                                                           // every P busy: the 10 ms network poll
		{Probes{Sent: 5, Answered: 5, Latency: slow}, 1, "slow-to-answer"},                                                           // half the Ps' worth
		// An idle process that answers slowly waits for the CPU (another
		// process's load), not for a P behind its own work: not its finding.
		{Probes{Sent: 5, Answered: 5, Latency: slow}, 0.01, ""},
		{Probes{Sent: 5, Answered: 5, Latency: slow}, 0.99, ""},
		{Probes{Sent: 5, Answered: 5, Latency: []time.Duration{4900 * time.Microsecond, 99 * time.Millisecond, 99 * time.Millisecond, time.Millisecond, time.Millisecond}}, 2, ""},
		{Probes{Sent: 5, Refused: 5}, 0, ""}, // nothing listens: unread, not a finding
	}
	for _, c := range probeCases {
		w := plainWindow()
		if c.cpu > 0 {
			w.CPUCores = c.cpu
		}
		p := c.p
		w.Probes = &p
		fs := diagnose(w)
		_, un := find(fs, "unresponsive")
		_, slow := find(fs, "slow-to-answer")
		got := ""
		if un {
			got = "unresponsive"
		} else if slow {
			got = "slow-to-answer"
		}
		if got != c.want {
			t.Errorf("probes %+v: %q, want %q", c.p, got, c.want)
		}
	}
}

func TestRuntimeViewRules(t *testing.T) {
	sample := func() *schedstat.Sample {
		return &schedstat.Sample{Interval: time.Second, GOMAXPROCS: 2, GoroutineStates: true,
			Runnable: 8, SchedLatency: schedstat.Quantiles{Count: 100, P99: 5 * time.Millisecond},
			TimerLateness: schedstat.Quantiles{Count: 100, P99: 5 * time.Millisecond},
			CPU:           time.Second, GCCPU: 250 * time.Millisecond, GCPause: schedstat.Quantiles{Count: 10, P99: time.Millisecond}}
	}
	cases := []struct {
		name string
		edit func(s *schedstat.Sample)
		want []string
	}{
		{"every rule at its threshold", func(s *schedstat.Sample) {}, []string{"oversubscribed", "timer-starvation", "gc-pressure"}},
		{"just under each", func(s *schedstat.Sample) {
			s.Runnable, s.TimerLateness.P99, s.GCCPU = 7, 4999*time.Microsecond, 249*time.Millisecond
		}, nil},
		{"sched p99 under 5 ms: not oversubscribed", func(s *schedstat.Sample) {
			s.SchedLatency.P99, s.TimerLateness.P99, s.GCCPU = 4*time.Millisecond, time.Millisecond, 0
		}, nil},
		{"a late timer with the Ps just under half busy: not timer-starvation", func(s *schedstat.Sample) {
			s.CPU = 999 * time.Millisecond // of 2 Ps' cores over 1 s
		}, []string{"oversubscribed", "gc-pressure"}},
		{"a late timer in an idle process (the kernel's delay, not a P's)", func(s *schedstat.Sample) {
			s.Runnable, s.CPU, s.GCCPU, s.TimerLateness.P99 = 0, 20*time.Millisecond, 0, 10*time.Millisecond
		}, nil},
		{"a GC pause p99 of 10 ms alone is gc-pressure", func(s *schedstat.Sample) {
			s.Runnable, s.TimerLateness.P99, s.GCCPU, s.GCPause.P99 = 0, 0, 0, 10*time.Millisecond
		}, []string{"gc-pressure"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := plainWindow()
			s := sample()
			c.edit(s)
			w.Runtime = s
			got := ids(&Result{Findings: diagnose(w)})
			for _, id := range []string{"oversubscribed", "timer-starvation", "gc-pressure"} {
				if slices.Contains(got, id) != slices.Contains(c.want, id) {
					t.Errorf("%s: findings %v, want %v", id, got, c.want)
				}
			}
		})
	}
}

func TestNothingFoundIsHealthyOnlyWithTheSourcesRead(t *testing.T) {
	if got := ids(&Result{Findings: diagnose(plainWindow())}); !slices.Equal(got, []string{"healthy"}) {
		t.Errorf("a quiet window: %v", got)
	}
}

func TestParseProcStat(t *testing.T) {
	start, cpu, err := parseProcStat([]byte("42 (my (odd) name) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 8 0 215680 1000 30 18446744073709551615"))
	if err != nil || start != 215680 || cpu != 3*time.Second {
		t.Errorf("start %d cpu %v err %v; want 215680, 3s", start, cpu, err)
	}
	for _, bad := range []string{"", "42 (x", "42 (x) S 1 2 3"} {
		if _, _, err := parseProcStat([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestGoVersionRule(t *testing.T) {
	for v, want := range map[string]bool{"go1.25.0": true, "go1.26.8": true, "go1.24.9": false, "go1.9": false, "go1.100": true, "devel": false} {
		if got := goAtLeast(v, 25); got != want {
			t.Errorf("goAtLeast(%q, 25) = %v", v, got)
		}
	}
}

// Throttling judged by its impact on the executor's accounted tasks: the
// p99 of their throttled part against their latency p99, at and across
// 25 % (warning: throttle.Costs, the pacer's judgement too) and 50 %
// (critical), never under 1 ms, only for the latency-sensitive classes.
func TestThrottlingImpactAtItsThresholds(t *testing.T) {
	at := func(class string, throttled, p99 time.Duration) *Window {
		w := quotaWindow(1.5, 2)
		cv := ClassView{Class: class, Accounted: 100, LatencyP99: p99}
		cv.PartsP99[account.Throttled] = throttled
		w.Executor = &ExecutorView{Classes: []ClassView{cv}}
		return w
	}
	for _, c := range []struct {
		name string
		w    *Window
		want Severity // "" for no finding
	}{
		{"no executor view", quotaWindow(1.5, 2), ""},
		{"just under 25 %", at("interactive", 24990*time.Microsecond, 100*time.Millisecond), ""},
		{"25 %", at("interactive", 25*time.Millisecond, 100*time.Millisecond), Warning},
		{"just under 50 %", at("interactive", 49*time.Millisecond, 100*time.Millisecond), Warning},
		{"50 %", at("critical", 50*time.Millisecond, 100*time.Millisecond), Critical},
		{"half, but under 1 ms", at("interactive", 900*time.Microsecond, 1800*time.Microsecond), ""},
		{"a batch class is not judged", at("batch", 80*time.Millisecond, 100*time.Millisecond), ""},
	} {
		f, ok := find(diagnose(c.w), "throttling-impact")
		switch {
		case c.want == "" && ok:
			t.Errorf("%s: %s %s", c.name, f.Severity, f.Summary)
		case c.want != "" && (!ok || f.Severity != c.want):
			t.Errorf("%s: found %v %s, want %s", c.name, ok, f.Severity, c.want)
		case ok && !strings.Contains(f.Summary, "p99 of"):
			t.Errorf("%s: summary %q does not say what it added to the p99", c.name, f.Summary)
		}
	}
}

// A throttled whole quota with Ps beyond it names QuotaStrict in the fix
// (the executor's slots fill the quota; the rest of the process takes it
// over); a fractional quota, or GOMAXPROCS at the quota, does not.
func TestThrottledWholeQuotaFixNamesQuotaStrict(t *testing.T) {
	for _, c := range []struct {
		q    float64
		g    int
		want bool
	}{{1, 2, true}, {2, 3, true}, {1.25, 2, false}, {2, 2, false}} {
		w := quotaWindow(c.q, c.g)
		w.Throttling = budget.Stat{Periods: 50, ThrottledPeriods: 25}
		w.CPUCores = c.q
		f, ok := find(diagnose(w), "cpu-throttled")
		if !ok {
			t.Fatalf("quota %v, GOMAXPROCS %d, half the periods throttled: no cpu-throttled finding", c.q, c.g)
		}
		if got := strings.Contains(f.Fix, "QuotaStrict"); got != c.want {
			t.Errorf("quota %v, GOMAXPROCS %d: fix names QuotaStrict %v, want %v: %s", c.q, c.g, got, c.want, f.Fix)
		}
	}
}

// Run delay is judged by its size: a fifth of the CPU budget lost to it
// is never healthy, however short each wait (issue 38's case: 0.547 s per
// second on a 2-core budget, many short wake-ups, called healthy).
func TestRunDelayOfAFifthOfTheBudgetIsNeverHealthy(t *testing.T) {
	cases := []struct {
		name     string
		perSec   float64 // run delay, seconds per second
		slices   int     // wake-ups in the 5 s window
		want     Severity
		wantNone bool
	}{
		{"0.547 s/s on 2 cores in short waits (27 %): warning", 0.547, 200000, Warning, false},
		{"0.39 s/s on 2 cores in short waits (19.5 %): nothing", 0.39, 200000, "", true},
		{"0.40 s/s on 2 cores (20 %): warning", 0.40, 200000, Warning, false},
		{"1.0 s/s on 2 cores in short waits (50 %): critical", 1.0, 200000, Critical, false},
		{"0.15 s/s in 1 ms waits (the per-wake-up rule): warning", 0.15, 750, Warning, false},
	}
	for _, c := range cases {
		w := plainWindow()
		w.Kernel = schedstat.Threads{Count: 4, RunDelay: time.Duration(c.perSec * float64(w.Duration)), Timeslices: uint64(c.slices), OnCPU: 5 * time.Second}
		w.RunnableThreads = 1.5
		fs := diagnose(w)
		f, ok := find(fs, "os-starvation")
		switch {
		case c.wantNone && ok:
			t.Errorf("%s: os-starvation %s", c.name, f.Severity)
		case !c.wantNone && (!ok || f.Severity != c.want):
			t.Errorf("%s: findings %v, want os-starvation at %s", c.name, fs, c.want)
		}
		if !c.wantNone && slices.ContainsFunc(fs, func(f Finding) bool { return f.ID == "healthy" }) {
			t.Errorf("%s: healthy beside a finding", c.name)
		}
	}
}

// The first finding is the one to fix first: warnings and criticals
// before info, then the configuration before the process's own causes
// before another process's competition before the symptoms.
func TestFindingsAreRankedByWhatToFixFirst(t *testing.T) {
	fs := []Finding{
		{ID: "at-capacity", Severity: Warning}, {ID: "os-starvation", Severity: Critical, lost: 0.5}, // half the budget to another process: first
		{ID: "gomaxprocs-above-quota", Severity: Info}, {ID: "oversubscribed", Severity: Warning},
		{ID: "slow-to-answer", Severity: Warning},
	}
	rank(fs)
	want := []string{"os-starvation", "oversubscribed", "slow-to-answer", "at-capacity", "gomaxprocs-above-quota"}
	if got := ids(&Result{Findings: fs}); !slices.Equal(got, want) {
		t.Errorf("ranked %v, want %v", got, want)
	}
	fs[0].Severity, fs[0].lost = Warning, 0.3 // a warning os-starvation comes after the process's own causes
	rank(fs)
	want = []string{"oversubscribed", "slow-to-answer", "os-starvation", "at-capacity", "gomaxprocs-above-quota"}
	if got := ids(&Result{Findings: fs}); !slices.Equal(got, want) {
		t.Errorf("ranked %v, want %v", got, want)
	}
}

// A critical os-starvation goes first only when another process takes
// half the budget or more. Critical by its wait per wake-up (0.72 s per
// second, 2.2 ms each: one CPU-bound process beside a 2-P service takes a
// third of the budget), it comes after the process's own causes: the CI
// run where the doctor put it before 200 runnable goroutines on 2 Ps.
func TestAStarvationCriticalByItsWaitsButUnderHalfTheBudgetComesAfterTheProcesssCauses(t *testing.T) {
	w := plainWindow()
	w.Duration, w.CPUCores, w.RunnableThreads = 2*time.Second, 1.28, 2
	w.Kernel = schedstat.Threads{Count: 6, RunDelay: 1438 * time.Millisecond, OnCPU: 2569 * time.Millisecond, Timeslices: 650}
	fs := diagnose(w)
	f, ok := find(fs, "os-starvation")
	if !ok || f.Severity != Critical {
		t.Fatalf("findings %v, want a critical os-starvation", fs)
	}
	fs = append(fs, Finding{ID: "oversubscribed", Severity: Warning})
	rank(fs)
	if got := ids(&Result{Findings: fs}); got[0] != "oversubscribed" {
		t.Errorf("ranked %v, want oversubscribed first: the run delay is 36 %% of the budget", got)
	}
	w.Kernel.RunDelay = 2100 * time.Millisecond // 1.05 s/s: 52 % of the budget
	fs = append(diagnose(w), Finding{ID: "oversubscribed", Severity: Warning})
	rank(fs)
	if got := ids(&Result{Findings: fs}); got[0] != "os-starvation" {
		t.Errorf("ranked %v, want os-starvation first: the run delay is 52 %% of the budget", got)
	}
}

// Never "healthy" from half a view: an unread source makes nothing found
// inconclusive; a Go program (or a binary that could not be read) without
// --url gets nothing-found-os-view; only a full view, or a program that
// is not Go, is healthy.
func TestHealthyOnlyFromAWholeView(t *testing.T) {
	healthy := func(goInfo GoInfo, unread ...string) *Result {
		r := &Result{Findings: []Finding{{ID: "healthy", Severity: Info}}, Unread: unread}
		r.Window.Go = goInfo
		return r
	}
	goProgram := GoInfo{GoVersion: "go1.26.0", QuotaAware: true}
	cases := []struct {
		name       string
		r          *Result
		url        string
		kernelRead bool
		goView     bool
		want       string
		sev        Severity
	}{
		{"Go program, both views read", healthy(goProgram), "http://x", true, true, "healthy", Info},
		{"Go program, no --url", healthy(goProgram), "", true, false, "nothing-found-os-view", Partial},
		{"not a Go program, no --url", healthy(GoInfo{NotGo: true}), "", true, false, "healthy", Info},
		{"a binary that could not be read, no --url", healthy(GoInfo{Unreadable: "permission denied"}, "/proc/1/exe: permission denied"), "", true, false, "inconclusive", Inconclusive},
		{"environ unreadable, with --url", healthy(goProgram, "/proc/9/environ: permission denied"), "http://x", true, true, "inconclusive", Inconclusive},
		{"schedstat unreadable", healthy(goProgram, "schedstat: permission denied"), "http://x", false, true, "inconclusive", Inconclusive},
		{"nothing from --url", healthy(goProgram), "http://x", true, false, "inconclusive", Inconclusive},
		{"a profile that timed out beside the trace", healthy(goProgram, "profile: timeout"), "http://x", true, true, "healthy", Info},
	}
	for _, c := range cases {
		var extras []string
		if len(c.r.Unread) > 0 && strings.HasPrefix(c.r.Unread[0], "profile") {
			extras = c.r.Unread
		}
		settle(c.r, c.url, c.kernelRead, c.goView, extras)
		if f := c.r.Findings[0]; f.ID != c.want || f.Severity != c.sev || c.r.Worst() != c.sev {
			t.Errorf("%s: %s %s (worst %s), want %s %s", c.name, f.ID, f.Severity, c.r.Worst(), c.want, c.sev)
		}
	}
}

// Throttling is judged by its size too: frozen time of a fifth of the
// budget is a finding even in a window of too few periods to judge a
// share of them.
func TestThrottledTimeOfAFifthOfTheBudgetIsAFinding(t *testing.T) {
	for _, c := range []struct {
		frozen time.Duration // in the 5 s window, 1-core quota
		want   Severity
	}{{900 * time.Millisecond, ""}, {time.Second, Warning}, {2500 * time.Millisecond, Critical}} {
		w := quotaWindow(1, 1)
		w.Throttling = budget.Stat{Periods: 10, ThrottledPeriods: 10, ThrottledTime: c.frozen} // too few periods for the share rule
		f, ok := find(diagnose(w), "cpu-throttled")
		switch {
		case c.want == "" && ok:
			t.Errorf("%v frozen (18 %% of the budget): cpu-throttled %s", c.frozen, f.Severity)
		case c.want != "" && (!ok || f.Severity != c.want):
			t.Errorf("%v frozen: cpu-throttled %v %s, want %s", c.frozen, ok, f.Severity, c.want)
		}
	}
}

// The fix for loops that hold the Ps names Checkpoint only where the
// profile shows the time in the program's own code: inside image/jpeg or
// a cgo library it names admission and smaller units.
func TestTheLoopFixFollowsWhereTheTimeIs(t *testing.T) {
	for _, c := range []struct {
		p    *ProfileView
		want string
	}{
		{nil, "Checkpoint"},
		{&ProfileView{Samples: 100, Own: 0.8, Library: 0.1}, "80% of the CPU samples are in the program's own code"},
		{&ProfileView{Samples: 100, Own: 0.1, Library: 0.8, TopLibrary: "image/jpeg"}, "most in image/jpeg"},
		{&ProfileView{Samples: 100, Cgo: 0.9}, "through cgo"},
	} {
		got := loopFix(&Window{Profile: c.p}, "call cpuwork.Checkpoint(ctx)")
		if !strings.Contains(got, c.want) {
			t.Errorf("profile %+v: fix %q, want %q", c.p, got, c.want)
		}
		if c.p != nil && (c.p.Library >= 0.5 || c.p.Cgo >= 0.5) && strings.Contains(got, "Checkpoint(ctx)") {
			t.Errorf("profile %+v: fix %q names Checkpoint", c.p, got)
		}
	}
	for _, c := range []struct {
		stack []string
		kind  string
	}{
		{[]string{"main.spin", "runtime.goexit"}, "own"},
		{[]string{"example.com/app/work.Hash", "main.main"}, "own"},
		{[]string{"image/jpeg.(*decoder).idct", "example.com/app/img.Thumb"}, "lib"},
		{[]string{"golang.org/x/image/draw.(*Kernel).Scale"}, "lib"},
		{[]string{"_Cfunc_vips_resize", "example.com/app/img.Thumb"}, "cgo"},
		{[]string{"runtime.mallocgc", "main.main"}, "runtime"},
		{nil, "cgo"},
	} {
		if k, _ := kind(c.stack, "example.com/app"); k != c.kind {
			t.Errorf("%v: %s, want %s", c.stack, k, c.kind)
		}
	}
}

// A figure resting on fewer than 50 events, or throttling measured in a
// window shorter than a quota period, says so in its evidence.
func TestEvidenceSaysWhenItRestsOnFewEvents(t *testing.T) {
	if got := rough(12, "wake-ups"); !strings.Contains(got, "only 12 wake-ups: a rough figure") {
		t.Errorf("rough(12) = %q", got)
	}
	if got := rough(50, "wake-ups"); got != "" {
		t.Errorf("rough(50) = %q, want nothing", got)
	}
}

func TestThrottlingInAWindowShorterThanAPeriodSaysSo(t *testing.T) {
	w := quotaWindow(1, 1)
	w.Duration = 50 * time.Millisecond
	w.Throttling = budget.Stat{Periods: 1, ThrottledPeriods: 1, ThrottledTime: 40 * time.Millisecond}
	f, ok := find(diagnose(w), "cpu-throttled")
	if !ok || !strings.Contains(strings.Join(f.Evidence, " "), "shorter than one quota period (100ms)") {
		t.Errorf("cpu-throttled %v, evidence %q", ok, f.Evidence)
	}
}

// doctor.md's findings table states the thresholds the code uses.
func TestDoctorDocsStateTheCodesThresholds(t *testing.T) {
	b, err := os.ReadFile("../../../../docs/doctor.md")
	if err != nil {
		t.Fatal(err)
	}
	row := func(id string) string {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "| `"+id+"` |") {
				return l
			}
		}
		t.Fatalf("doctor.md has no row for %s", id)
		return ""
	}
	ms := func(d time.Duration) string { return fmt.Sprintf("%d ms", d/time.Millisecond) }
	for id, wants := range map[string][]string{
		"slow-to-answer":   {"≥ " + ms(slowAnswer)},
		"oversubscribed":   {fmt.Sprintf("≥ %g runnable goroutines per P", runnablePerPWarn), "p99 ≥ " + ms(schedP99Warn)},
		"timer-starvation": {"≥ " + ms(timerP99Warn)},
		"gc-pressure":      {fmt.Sprintf("GC ≥ %g %%", 100*gcShareWarn), "p99 ≥ " + ms(gcPauseP99Warn)},
	} {
		r := row(id)
		for _, w := range wants {
			if !strings.Contains(r, w) {
				t.Errorf("doctor.md's %s row does not say %q: %s", id, w, r)
			}
		}
	}
}

// Where a GOMAXPROCS above the quota came from is said as it is: from
// the environment variable, not from Go's default rule; and a program
// that links cpuwork is never told to adopt an executor.
func TestTheFindingsSayWhereGOMAXPROCSCameFromAndKnowCpuwork(t *testing.T) {
	w := quotaWindow(1, 4)
	w.Budget.GOMAXPROCSEnv = "4"
	f, _ := find(diagnose(w), "gomaxprocs-above-quota")
	if !strings.Contains(f.Summary, "environment variable") || strings.Contains(f.Summary, "max(2, ceil(quota))") {
		t.Errorf("GOMAXPROCS=4 from the environment: %q", f.Summary)
	}
	w = quotaWindow(1, 4)
	w.CPUCores, w.Throttling = 1, budget.Stat{Periods: 50, ThrottledPeriods: 30, ThrottledTime: time.Second}
	w.Go.Cpuwork = true
	for _, f := range diagnose(w) {
		if strings.Contains(f.Fix, "a cpuwork.Executor") {
			t.Errorf("%s for a program that links cpuwork: %q", f.ID, f.Fix)
		}
	}
}

// What an inconclusive diagnosis lacks is said with its own remedy: a
// program that serves no Go view is told to serve one, not to run as
// root.
func TestAnInconclusiveDiagnosisSaysHowToGetWhatItLacks(t *testing.T) {
	res := &Result{Findings: []Finding{{ID: "healthy", Severity: Info}}}
	settle(res, "http://127.0.0.1:1", true, false, nil)
	if f := res.Findings[0]; f.ID != "inconclusive" || !strings.Contains(f.Fix, "net/http/pprof") || strings.Contains(f.Fix, "root") {
		t.Errorf("no Go view at --url: %s, %q", f.ID, f.Fix)
	}
}
