// Package doctor diagnoses the CPU scheduling of a running process from
// outside: its CPU budget (cgroup quota of the leaf and ancestors, affinity)
// against its GOMAXPROCS, the throttling of the cgroup that sets the quota,
// the kernel's run delay of its threads, and, when the process serves
// schedstat.Handler, the Go runtime's view (runnable goroutines, scheduling
// latency, timer lateness, GC). Each problem becomes a Finding with its
// evidence and the change that fixes it.
package doctor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cpuwork/cpuwork"
	"github.com/cpuwork/cpuwork/account"
	"github.com/cpuwork/cpuwork/budget"
	"github.com/cpuwork/cpuwork/internal/throttle"
	"github.com/cpuwork/cpuwork/schedstat"
)

// Severity of a finding.
type Severity string

const (
	Info     Severity = "info"
	Warning  Severity = "warning"
	Critical Severity = "critical"
	// Inconclusive: a source the diagnosis needs could not be read, and
	// nothing found in the rest: never reported as healthy.
	Inconclusive Severity = "inconclusive"
	// Partial: nothing found in the OS view of a Go program, whose Go
	// scheduler view (--url) was not asked for: not a full "healthy".
	Partial Severity = "partial"
)

// Finding is one diagnosis.
type Finding struct {
	ID       string   `json:"id"`       // stable: gomaxprocs-above-quota, cpu-throttled, throttling-impact, os-starvation, self-oversubscribed, at-capacity, unresponsive, slow-to-answer, slow-to-send-headers, not-answered, oversubscribed, timer-starvation, gc-pressure, inconclusive, healthy
	Severity Severity `json:"severity"` // info, warning or critical
	Summary  string   `json:"summary"`
	Evidence []string `json:"evidence"` // numbers and the files they came from
	Fix      string   `json:"fix"`      // the exact change
	// lost is the share of the CPU budget os-starvation's run delay
	// takes (rank puts it first at lostShareCritical or more).
	lost float64
}

// Config selects the target and the window.
type Config struct {
	PID      int
	URL      string        // base URL of the target's HTTP server serving /debug/cpuwork; "" for none
	Duration time.Duration // observation window; 0 means 5 s
	// Sleep waits out the window (tests replace it); nil means time.Sleep.
	Sleep func(time.Duration)
}

// Window is what was measured over the observation window.
type Window struct {
	Duration time.Duration `json:"duration_ns"`
	Budget   budget.Budget `json:"budget"`
	// GOMAXPROCS is the target's, from /debug/cpuwork, else what the Go
	// runtime's rule gives from outside (budget.RuntimeGOMAXPROCS).
	GOMAXPROCS       int    `json:"gomaxprocs,omitempty"`
	GOMAXPROCSSource string `json:"gomaxprocs_source"`
	// GOMAXPROCSUnknown, when not empty, says why GOMAXPROCS is not known
	// (not a Go program; its binary or environment could not be read): it
	// is then absent, never 0.
	GOMAXPROCSUnknown string            `json:"gomaxprocs_unknown,omitempty"`
	Kernel            schedstat.Threads `json:"kernel"`     // run delay and on-CPU time in the window
	Throttling        budget.Stat       `json:"throttling"` // cpu.stat delta of the limiting cgroup
	// KernelUnknown and ThrottlingUnknown, when not empty, say why the
	// threads' run delay or the limiting cgroup's cpu.stat could not be
	// read: those figures are then unknown, not 0.
	KernelUnknown     string            `json:"kernel_unknown,omitempty"`
	ThrottlingUnknown string            `json:"throttling_unknown,omitempty"`
	LimitDir          string            `json:"limit_dir"`
	Runtime           *schedstat.Sample `json:"runtime,omitempty"` // the target's last sample, with --url
	// Executor is the target's executor view (cpuwork.Executor.Stats at
	// /debug/cpuwork), with --url.
	Executor *ExecutorView `json:"executor,omitempty"`
	Trace    *TraceView    `json:"trace,omitempty"`   // the target's execution trace, with --url and net/http/pprof
	Profile  *ProfileView  `json:"profile,omitempty"` // the target's CPU profile, likewise
	CPUCores float64       `json:"cpu_cores"`         // CPU used / window (/proc/PID/stat: threads that exited included)
	// RunnableThreads is the mean number of the target's threads in state R
	// over the window (sampled ten times).
	RunnableThreads float64              `json:"runnable_threads"`
	Go              GoInfo               `json:"go"`
	Probes          *Probes              `json:"probes,omitempty"` // answers to trivial requests to --url
	Pressure        []schedstat.Pressure `json:"cpu_pressure,omitempty"`
	// Siblings counts the other cgroups below the one that sets the quota
	// when that is an ancestor of the target's (they share its quota).
	Siblings int `json:"quota_siblings"`
}

// Result is a diagnosis.
type Result struct {
	PID      int       `json:"pid"`
	Window   Window    `json:"window"`
	Findings []Finding `json:"findings"`
	// Unread lists what could not be read and why.
	Unread []string `json:"unread"`
	// NotServed lists the optional sources the target does not serve
	// (404): a program without net/http/pprof's profile, or without a
	// cpuwork executor. They take nothing from the verdict.
	NotServed []string `json:"not_served"`
	// Lacks lists what a verdict needs and could not have: the sources
	// whose absence makes nothing-found inconclusive. Empty: the view was
	// whole.
	Lacks []string `json:"lacks"`
}

// Worst returns the highest severity among the findings: critical, then
// warning, then inconclusive, then partial, then info.
func (r *Result) Worst() Severity {
	rank := map[Severity]int{Info: 0, Partial: 1, Inconclusive: 2, Warning: 3, Critical: 4}
	w := Info
	for _, f := range r.Findings {
		if rank[f.Severity] > rank[w] {
			w = f.Severity
		}
	}
	return w
}

// margin is how long the doctor waits past the window for its sources
// (trace, profile, /debug/cpuwork, probes): a target that has not answered
// by then is reported as not answering, never waited for in turn.
var margin = 5 * time.Second

// Run observes cfg.PID for cfg.Duration and diagnoses it. It fails only
// when the process cannot be observed at all (gone, /proc unreadable) or
// was replaced during the window (a reused PID: its start time changed).
// Every source is read within the window plus a margin of 5 s, in parallel.
func Run(cfg Config) (*Result, error) {
	if cfg.PID <= 0 {
		return nil, fmt.Errorf("doctor: --pid %d: must be a process ID", cfg.PID)
	}
	if cfg.Duration < 0 {
		return nil, fmt.Errorf("doctor: duration %v: must be positive", cfg.Duration)
	}
	if cfg.Duration == 0 {
		cfg.Duration = 5 * time.Second
	}
	if cfg.Sleep == nil {
		cfg.Sleep = time.Sleep
	}
	res := &Result{PID: cfg.PID, Findings: []Finding{}, Unread: []string{}, NotServed: []string{}, Lacks: []string{}}
	start0, cpu0, err := procStat(cfg.PID)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("doctor: no process %d (it exited, or the PID is wrong: ps -e lists the running ones)", cfg.PID)
	}
	if err != nil {
		return nil, fmt.Errorf("doctor: pid %d: %w", cfg.PID, err)
	}
	b, err := budget.DetectPID(cfg.PID)
	if err != nil {
		return nil, fmt.Errorf("doctor: budget of pid %d: %w", cfg.PID, err)
	}
	w := &res.Window
	w.Budget = b
	w.Go = goInfo(cfg.PID)
	describeGOMAXPROCS(res, cfg)
	readStat := limitingCgroup(res)
	t0, terr := schedstat.ReadThreads(cfg.PID)
	if terr != nil {
		if errors.Is(terr, os.ErrNotExist) {
			return nil, fmt.Errorf("doctor: pid %d: %w", cfg.PID, terr)
		}
		res.Unread = append(res.Unread, terr.Error())
	}
	if terr != nil {
		w.KernelUnknown = terr.Error()
	}
	s0, haveStat := readStat()
	if _, quota := b.Limiting(); quota && !haveStat {
		w.ThrottlingUnknown = "the limiting cgroup's cpu.stat could not be read"
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Duration+margin)
	defer cancel()
	rm := startRemote(ctx, cfg, w.Go.MainModule)
	runnableDone := make(chan float64, 1)
	go func() { runnableDone <- sampleRunnable(ctx, cfg.PID, 10, cfg.Duration) }()
	start := time.Now()
	cfg.Sleep(cfg.Duration)
	w.Duration = time.Since(start)
	start1, cpu1, err := procStat(cfg.PID)
	if err != nil {
		return nil, fmt.Errorf("doctor: pid %d during the window: %w", cfg.PID, err)
	}
	if start1 != start0 {
		return nil, fmt.Errorf("doctor: pid %d exited during the window and the PID now names another process (start time %d, was %d): nothing measured belongs to one process", cfg.PID, start1, start0)
	}
	w.CPUCores = (cpu1 - cpu0).Seconds() / w.Duration.Seconds()
	if terr == nil {
		if t1, err := schedstat.ReadThreads(cfg.PID); err == nil {
			w.Kernel = t1.Sub(t0)
		} else {
			res.Unread = append(res.Unread, err.Error())
			w.KernelUnknown = err.Error()
		}
	}
	if haveStat {
		if s1, ok := readStat(); ok {
			w.Throttling = budget.Stat{Dir: s1.Dir, Periods: s1.Periods - s0.Periods,
				ThrottledPeriods: s1.ThrottledPeriods - s0.ThrottledPeriods,
				ThrottledTime:    s1.ThrottledTime - s0.ThrottledTime, Usage: s1.Usage - s0.Usage}
		}
	}
	// The runtime view at the window's end, fetched at once beside the
	// trace and profile still arriving (all within the margin).
	rm.sampleEnd(ctx)
	w.RunnableThreads = <-runnableDone
	goView, extras := rm.collect(res)
	res.Findings = diagnose(w)
	settle(res, cfg.URL, terr == nil, goView, extras)
	return res, nil
}

// limitingCgroup sets the window's limiting cgroup, its siblings and the
// CPU pressure of the process's cgroup and of the host, and returns a
// reader of the limiting cgroup's cpu.stat (false when there is none or
// it could not be read, listed as unread).
func limitingCgroup(res *Result) func() (budget.Stat, bool) {
	w := &res.Window
	b := w.Budget
	for _, f := range []string{filepath.Join(b.CgroupDir, "cpu.pressure"), "/proc/pressure/cpu"} {
		if b.CgroupDir == "" && f != "/proc/pressure/cpu" {
			continue
		}
		if p := schedstat.ReadPressure(f); p.Available {
			w.Pressure = append(w.Pressure, p)
		}
	}
	l, ok := b.Limiting()
	if !ok {
		return func() (budget.Stat, bool) { return budget.Stat{}, false }
	}
	w.LimitDir = l.Dir
	if !l.Leaf {
		w.Siblings = siblings(l.Dir, b.CgroupDir)
	}
	return func() (budget.Stat, bool) {
		st, err := budget.ReadStatDir(l.Dir)
		if err != nil {
			res.Unread = append(res.Unread, err.Error())
			return st, false
		}
		return st, true
	}
}

// describeGOMAXPROCS sets the window's GOMAXPROCS and where it comes
// from, as far as it can be read from outside the process (its binary,
// its environment, the runtime's rule applied to its budget), and lists
// what could not be read.
func describeGOMAXPROCS(res *Result, cfg Config) {
	w := &res.Window
	b := w.Budget
	switch {
	case w.Go.GoVersion == "" && w.Go.NotGo:
		w.GOMAXPROCSUnknown = "not a Go program (" + w.Go.Unreadable + ")"
		w.GOMAXPROCSSource = w.GOMAXPROCSUnknown
	case w.Go.GoVersion == "":
		w.GOMAXPROCSUnknown = "its binary could not be read (" + w.Go.Unreadable + ")"
		w.GOMAXPROCSSource = w.GOMAXPROCSUnknown
	case b.GOMAXPROCSEnvUnknown != "" && cfg.URL == "":
		w.GOMAXPROCSUnknown = "its environment could not be read (" + b.GOMAXPROCSEnvUnknown + "): a GOMAXPROCS variable would go unseen; give --url to read it"
		w.GOMAXPROCSSource = w.GOMAXPROCSUnknown
	case !w.Go.QuotaAware && b.GOMAXPROCSEnv == "":
		w.GOMAXPROCS = b.Affinity
		w.GOMAXPROCSSource = fmt.Sprintf("%s, whose default GOMAXPROCS is the CPU count (affinity), blind to the quota (Go < 1.25, or a main module at go < 1.25: containermaxprocs=0)", w.Go.GoVersion)
	case b.GOMAXPROCSEnv != "":
		w.GOMAXPROCS = b.RuntimeGOMAXPROCS
		w.GOMAXPROCSSource = "its GOMAXPROCS environment variable (GOMAXPROCS=" + b.GOMAXPROCSEnv + ")"
	default:
		w.GOMAXPROCS = b.RuntimeGOMAXPROCS
		w.GOMAXPROCSSource = "the Go runtime's default rule applied from outside (affinity, leaf quota; no GOMAXPROCS variable)"
		if b.GOMAXPROCSEnv == "" && cfg.URL == "" {
			w.GOMAXPROCSSource += "; unknown if set in code (runtime.GOMAXPROCS, automaxprocs): give --url to read it"
		}
	}
	if w.Go.GoVersion == "" && !w.Go.NotGo {
		res.Unread = append(res.Unread, fmt.Sprintf("/proc/%d/exe: %s: whether it is a Go program, and its GOMAXPROCS rule, are unknown", cfg.PID, w.Go.Unreadable))
	}
	if b.GOMAXPROCSEnvUnknown != "" && w.Go.GoVersion != "" {
		res.Unread = append(res.Unread, fmt.Sprintf("/proc/%d/environ: %s: a GOMAXPROCS variable would go unseen", cfg.PID, b.GOMAXPROCSEnvUnknown))
	}
}

// remote is what the doctor reads from the target's URL (--url) over
// the window, each source arriving on its channel: the CPU profile, the
// execution trace, the probes, and the executor's and runtime's views at
// the window's start and end. A nil *remote reads nothing.
type remote struct {
	url      string
	profile  chan profiled
	trace    chan traced
	probes   chan *Probes
	exStart  chan *ExecutorView
	endState chan sampled
}

type traced struct {
	v   *TraceView
	err error
}

type profiled struct {
	v   *ProfileView
	err error
}

type sampled struct {
	s   *schedstat.Sample
	ex  *ExecutorView
	err error
}

// startRemote starts reading cfg.URL's sources for the window (nil
// without a URL); mainModule names the target's code in its profile.
func startRemote(ctx context.Context, cfg Config, mainModule string) *remote {
	if cfg.URL == "" {
		return nil
	}
	rm := &remote{url: cfg.URL, profile: make(chan profiled, 1), trace: make(chan traced, 1),
		probes: make(chan *Probes, 1), exStart: make(chan *ExecutorView, 1)}
	d := min(cfg.Duration, 5*time.Second)
	go func() {
		v, err := fetchProfile(ctx, cfg.URL, mainModule, d)
		rm.profile <- profiled{v, err}
	}()
	// An execution trace over (most of) the window, from the target's
	// net/http/pprof; a target without it is reported under "not read".
	go func() {
		v, err := fetchTrace(ctx, cfg.URL, d)
		rm.trace <- traced{v, err}
	}()
	go func() { rm.probes <- probe(ctx, cfg.URL, 5, cfg.Duration, margin) }()
	// The executor's counters at the window's start: with the end's,
	// what it refused in the window.
	go func() { _, ex, _ := fetch(ctx, cfg.URL); rm.exStart <- ex }()
	return rm
}

// sampleEnd starts reading the runtime's and the executor's views at the
// window's end.
func (rm *remote) sampleEnd(ctx context.Context) {
	if rm == nil {
		return
	}
	rm.endState = make(chan sampled, 1)
	go func() { s, ex, err := fetch(ctx, rm.url); rm.endState <- sampled{s, ex, err} }()
}

// collect waits for every source into res's window and reports whether
// Go's own view was read (the execution trace or the sampler's scheduler
// metrics) and which failures are an extra's. The CPU profile and the
// executor's view are extras: a 404 there means the program does not
// serve them (NotServed), and their other failures are listed but take
// nothing from the verdict.
func (rm *remote) collect(res *Result) (goView bool, extras []string) {
	if rm == nil {
		return false, nil
	}
	w := &res.Window
	var goViewErrs []string
	failed := func(err error, extra bool, absent string) {
		switch {
		case notServed(err):
			var se *statusError
			errors.As(err, &se)
			res.NotServed = append(res.NotServed, se.url+": "+absent+" (404)")
			return
		case extra:
			extras = append(extras, err.Error())
		default:
			goViewErrs = append(goViewErrs, err.Error())
		}
		res.Unread = append(res.Unread, err.Error())
	}
	w.Probes = <-rm.probes
	if w.Probes.Refused == w.Probes.Sent {
		res.Unread = append(res.Unread, fmt.Sprintf("%s: connection refused: nothing listens there", rm.url))
	}
	if p := <-rm.profile; p.err != nil {
		failed(p.err, true, "no CPU profile served (net/http/pprof)")
	} else {
		w.Profile = p.v
	}
	if t := <-rm.trace; t.err != nil {
		failed(t.err, false, "no execution trace served (net/http/pprof)")
	} else {
		w.Trace, goView = t.v, true
	}
	got := <-rm.endState
	if got.err != nil {
		// Go's view when the trace is missing; an extra beside it.
		failed(got.err, false, "no cpuwork executor or schedstat.Handler in this program")
	} else {
		w.Runtime, w.Executor, goView = got.s, got.ex, true
		if ex0 := <-rm.exStart; ex0 != nil && got.ex != nil && got.ex.Submitted >= ex0.Submitted {
			got.ex.WindowSubmitted, got.ex.WindowShed = got.ex.Submitted-ex0.Submitted, got.ex.Shed-min(ex0.Shed, got.ex.Shed)
		}
		if got.s.GOMAXPROCS > 0 {
			w.GOMAXPROCS, w.GOMAXPROCSSource = got.s.GOMAXPROCS, "the target's /debug/cpuwork"
		}
	}
	if goView {
		// One of the two gave Go's view: the other's failure is an extra's.
		extras = append(extras, goViewErrs...)
	}
	return goView, extras
}

// missingFix says how to get what a verdict lacked: the run delay needs
// the target's user or root; Go's view needs the target to serve it.
func missingFix(kernelRead, goViewMissing bool) string {
	var fix []string
	if !kernelRead {
		fix = append(fix, "run the doctor as the target's user or as root, so that /proc/PID/task/*/schedstat can be read")
	}
	if goViewMissing {
		fix = append(fix, `serve Go's view at --url: import _ "net/http/pprof" (or mount its handlers, trace among them) and mount schedstat.Handler at /debug/cpuwork, outside any admission middleware`)
	}
	return strings.Join(fix, "; ") + "; then run again"
}

// settle turns a "healthy" that rests on half a view into what it is:
// inconclusive when a source the diagnosis needs could not be read (the
// threads' run delay; with url, Go's own view: the execution trace or
// /debug/cpuwork's sample; the binary or environment of a Go program),
// naming it; nothing-found-os-view for a Go program (or a binary that
// could not be read) diagnosed without url. kernelRead says whether the
// threads' schedstat was read, goView whether Go's view was; extras are
// the entries of res.Unread from optional sources (a profile, the
// executor's view beside the trace), listed but not needed.
func settle(res *Result, url string, kernelRead, goView bool, extras []string) {
	w := &res.Window
	var missing []string
	if !kernelRead {
		missing = append(missing, "the threads' run delay (/proc/PID/task/*/schedstat)")
	}
	if url != "" && !goView {
		missing = append(missing, "Go's own view from "+url+" (an execution trace at /debug/pprof/trace, or schedstat.Handler at /debug/cpuwork)")
	}
	var needed []string
	for _, u := range res.Unread {
		if !slices.Contains(extras, u) {
			needed = append(needed, u)
		}
	}
	res.Lacks = append(append([]string{}, missing...), needed...)
	if res.Findings[0].ID == "healthy" {
		switch {
		case len(missing) > 0:
			res.Findings[0] = Finding{ID: "inconclusive", Severity: Inconclusive,
				Summary:  "nothing found, but the diagnosis lacks " + strings.Join(missing, " and ") + ": not healthy, not judged",
				Evidence: append([]string{}, res.Unread...),
				Fix:      missingFix(kernelRead, url != "" && !goView)}
		case len(needed) > 0:
			// Never healthy from half a view: what was not read is named.
			res.Findings[0] = Finding{ID: "inconclusive", Severity: Inconclusive,
				Summary:  "nothing found in what could be read, but some sources could not be (see \"not read\"): not healthy, not judged",
				Evidence: append(res.Findings[0].Evidence, res.Unread...),
				Fix:      "make the unread sources readable (run as the target's user or root; serve net/http/pprof and /debug/cpuwork at --url) and run again"}
		}
		if res.Findings[0].ID == "healthy" && url == "" && !w.Go.NotGo {
			// Half a view: the kernel's side was checked, Go's run queues,
			// timers and GC were not.
			f := &res.Findings[0]
			f.ID, f.Severity = "nothing-found-os-view", Partial
			f.Summary = "nothing found in the OS view (CPU used, kernel run delay, throttling, the budget and GOMAXPROCS); the Go scheduler's view (run-queue waits, timers, GC) needs --url"
			f.Fix = "to check the Go side, serve net/http/pprof (and schedstat.Handler at /debug/cpuwork) on a loopback port and run again with --url http://127.0.0.1:PORT"
		}
	}
}

// fewEvents is how many events a percentile or a mean rests on before the
// evidence calls it rough: a p99 of 50 is its largest value or close to it.
const fewEvents = 50

// rough says so when a figure rests on fewer than fewEvents events.
func rough(n int64, what string) string {
	if n >= fewEvents {
		return ""
	}
	return fmt.Sprintf("; only %d %s: a rough figure (fewer than %d)", n, what, fewEvents)
}

// capacityFinding is at-capacity: the CPU budget used up over the whole
// window, or the executor's own view of work it could not take.
func capacityFinding(w *Window) (Finding, bool) {
	b := w.Budget
	full := w.Duration > 0 && b.Cores > 0 && w.CPUCores >= capacityWarn*b.Cores
	ex := w.Executor
	queued := ex != nil && ex.Slots > 0 && ex.Free <= 0 && ex.Queued > 0
	shed := ex != nil && ex.WindowShed > 0
	if !full && !queued && !shed {
		return Finding{}, false
	}
	ev := []string{fmt.Sprintf("CPU used %.2f cores of a %.2f-core budget (%s) over the whole %v window (/proc/PID/stat)", w.CPUCores, b.Cores, b.Source, w.Duration.Round(time.Millisecond))}
	summary := "the process used its whole CPU budget for the whole window: work that arrives now waits (in Go's run queues, the kernel's, or a queue of its own)"
	if queued {
		ev = append(ev, fmt.Sprintf("the executor's %d slots all busy and %d tasks waiting for one at the window's end (/debug/cpuwork)", ex.Slots, ex.Queued))
	}
	if shed {
		ev = append(ev, fmt.Sprintf("the executor refused %d of %d submissions in the window (/debug/cpuwork at its start and end)", ex.WindowShed, ex.WindowSubmitted))
	}
	if !full {
		summary = "the executor serves all its slots can and queues or refuses the rest: the load is over what the process serves"
	}
	for _, p := range w.Pressure {
		ev = append(ev, fmt.Sprintf("CPU pressure (PSI) some avg10 %.1f%% (%s)", p.SomeAvg10, p.File))
	}
	return Finding{ID: "at-capacity", Severity: Warning, Summary: summary, Evidence: ev, Fix: capacityFix(w)}, true
}

// probeFinding is what the probes say, if anything: headers sent slowly,
// answers not readable, unresponsive, or slow to answer.
func probeFinding(w *Window) (Finding, bool) {
	b := w.Budget
	p := w.Probes
	if p == nil || p.Sent == 0 || p.Refused >= p.Sent {
		return Finding{}, false
	}
	ev := fmt.Sprintf("%d of %d trivial requests answered within the window + %v, median %v; %d timed out", p.Answered, p.Sent, margin, short(p.median()), p.TimedOut)
	if p.SlowHeaders > 0 {
		ev += fmt.Sprintf("; %d began their answer in time and sent its headers slowly", p.SlowHeaders)
	}
	if p.Failed > 0 {
		ev += fmt.Sprintf("; %d not answered: %s", p.Failed, strings.Join(p.Why, "; "))
	}
	switch {
	case p.SlowHeaders*2 >= p.Sent:
		return Finding{ID: "slow-to-send-headers", Severity: Warning,
			Summary:  "the process begins its answers to trivial requests in time but sends their headers slowly: what keeps them waiting is not a P",
			Evidence: []string{ev},
			Fix:      "look at what writes the headers: a proxy in front of the process, a handler or middleware that writes them slowly, or the network in between; the CPU view says nothing of it",
		}, true
	case p.Failed*2 >= p.Sent:
		return Finding{ID: "not-answered", Severity: Warning,
			Summary:  "the trivial requests got answers the doctor could not read, so it cannot judge how fast the process answers",
			Evidence: []string{ev},
			Fix:      "give --url the address of the process's own HTTP server (not a proxy or another protocol's port), serving plain HTTP/1.1 or HTTP/2",
		}, true
	case p.TimedOut*2 >= p.Sent:
		return Finding{ID: "unresponsive", Severity: Critical,
			Summary:  "the process did not answer trivial requests within the window: it is too saturated to run its network handlers",
			Evidence: []string{ev, fmt.Sprintf("CPU used %.2f cores of %.2f; %.1f threads runnable on average", w.CPUCores, b.Cores, w.RunnableThreads)},
			Fix:      bound(w, "bound CPU-bound concurrency so that handlers and the netpoller get a P (a cpuwork.Executor with slots below GOMAXPROCS, or Options.Batch.SpareP), and shed load at the door instead of queueing it behind busy goroutines"),
		}, true
	case p.Answered > 0 && p.median() >= slowAnswer && w.CPUCores >= busyShare*busyCores(w):
		return Finding{ID: "slow-to-answer", Severity: Warning,
			Summary:  fmt.Sprintf("a trivial request takes %v (median) to answer: requests wait for a P behind CPU-bound work", short(p.median())),
			Evidence: []string{ev},
			Fix:      loopFix(w, bound(w, "bound CPU-bound concurrency (a cpuwork.Executor)")+", call cpuwork.Checkpoint in long loops and serve the listener through cpuwork.WatchListener: with every P busy Go polls the network only every 10 ms, and Checkpoint then wakes the netpoller when a request arrives"),
		}, true
	}
	return Finding{}, false
}

// whyAbove says where a GOMAXPROCS above the quota came from.
func whyAbove(w *Window) string {
	if w.Budget.GOMAXPROCSEnv != "" {
		return "as its GOMAXPROCS environment variable sets it"
	}
	return "as Go >= 1.25's rule max(2, ceil(quota)) makes it"
}

// capacityFix is at-capacity's fix.
func capacityFix(w *Window) string {
	if how := runsCpuwork(w); how != "" {
		return "the program runs cpuwork (" + how + "), whose executor queues and sheds by class at capacity: this is the load, not a fault; scale out on queue wait (cpuwork_queue_wait_seconds) or give it more CPU; a batch job at capacity is doing its job"
	}
	return "if this is a service, its latency grows with the load from here: bound CPU-bound concurrency (a cpuwork.Executor, which queues and sheds by class) and scale out on queue wait; a batch job at capacity is doing its job"
}

// runsCpuwork says how the doctor knows the target runs cpuwork ("":
// it does not know it to): the executor's view at /debug/cpuwork, or
// the module in its build information.
func runsCpuwork(w *Window) string {
	switch {
	case w.Executor != nil:
		return "its executor serves /debug/cpuwork"
	case w.Go.Cpuwork:
		return "its binary links " + cpuworkModule
	}
	return ""
}

// bound is a fix's words for bounding CPU-bound concurrency: adopt, for
// a program not known to run cpuwork; for one that does, what to do
// with the executor it has.
func bound(w *Window, adopt string) string {
	how := runsCpuwork(w)
	if how == "" {
		return adopt
	}
	return "the program runs cpuwork (" + how + "): route every CPU-bound path through its executor (Do, or the middleware), give its requests a latency objective so that it sheds what it cannot serve in time, and keep /debug/ outside admission"
}

// loopFix is the fix for work that holds every P without yielding:
// checkpoint (Checkpoint in the program's loops) when the CPU profile
// shows the time in the program's own code or was not read; when it
// shows the time mostly inside a library or in C through cgo, where no
// Checkpoint can be put, admission and smaller units of work instead.
func loopFix(w *Window, checkpoint string) string {
	p := w.Profile
	if how := runsCpuwork(w); how != "" {
		lib := ""
		if p != nil && p.Samples > 0 && p.Library+p.Cgo >= 0.5 {
			lib = fmt.Sprintf(" (%.0f%% of the CPU samples are inside libraries or C, so a Checkpoint goes between their calls)", 100*(p.Library+p.Cgo))
		}
		return "the program runs cpuwork (" + how + "): its tasks hold every P while they run and hand one over at a Checkpoint" + lib +
			"; call Checkpoint at least every few hundred microseconds of work, serve the listener through cpuwork.WatchListener, and if handlers must answer at once while every slot is busy, leave them a P (Options.Slots below GOMAXPROCS, or Options.Batch.SpareP for batch work)"
	}
	if p == nil || p.Samples == 0 {
		return checkpoint
	}
	const most = 0.5
	admit := bound(w, "admit the work through a cpuwork.Executor with a class (slots = the budget: requests queue and shed instead of sharing every P)") + " and make each unit smaller where the library allows (a smaller input, Executor.For over its parts)"
	switch {
	case p.Cgo >= most:
		return fmt.Sprintf("%.0f%% of the CPU samples are in C called through cgo, where Checkpoint cannot reach: %s", 100*p.Cgo, admit)
	case p.Library >= most:
		return fmt.Sprintf("%.0f%% of the CPU samples are inside libraries (most in %s), not in the program's own loops, so Checkpoint can only go between their calls: %s", 100*p.Library, p.TopLibrary, admit)
	}
	return fmt.Sprintf("%s (%.0f%% of the CPU samples are in the program's own code)", checkpoint, 100*p.Own)
}

// siblings counts the cgroup directories below limitDir (the ancestor
// that sets the quota) other than the branch that holds targetDir: they
// share the quota with the target.
func siblings(limitDir, targetDir string) int {
	ents, err := os.ReadDir(limitDir)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range ents {
		d := filepath.Join(limitDir, e.Name())
		if e.IsDir() && d != targetDir && !strings.HasPrefix(targetDir, d+"/") {
			n++
		}
	}
	return n
}

func environReadable(pid int) bool {
	f, err := os.Open(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return false
	}
	f.Close()
	return true
}

// fetch reads the target's schedstat.Handler, within ctx: the sampler's
// last sample and, when the target serves it (cpuwork.Executor.Stats), its
// executor's view.
func fetch(ctx context.Context, base string) (*schedstat.Sample, *ExecutorView, error) {
	u := strings.TrimSuffix(base, "/") + "/debug/cpuwork"
	body, err := Get(ctx, u, "mount schedstat.Handler there")
	if err != nil {
		return nil, nil, err
	}
	defer body.Close()
	s, ex, err := readDebug(body)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", u, err)
	}
	return s, ex, nil
}

// FetchView reads the executor's view a target serves at
// base/debug/cpuwork (schedstat.Handler), within ctx; nil when it serves
// none.
func FetchView(ctx context.Context, base string) (*ExecutorView, error) {
	u := strings.TrimSuffix(base, "/") + "/debug/cpuwork"
	body, err := Get(ctx, u, "mount schedstat.Handler there")
	if err != nil {
		return nil, err
	}
	defer body.Close()
	_, ex, err := decodeDebug(body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", u, err)
	}
	return ex, nil
}

// readDebug parses a /debug/cpuwork body, at most maxDebugBody bytes.
func readDebug(r io.Reader) (*schedstat.Sample, *ExecutorView, error) {
	s, ex, err := decodeDebug(r)
	if err == nil && s.Interval == 0 {
		return nil, nil, fmt.Errorf("no sample yet (the sampler takes its first one interval after it starts)")
	}
	return s, ex, err
}

// decodeDebug decodes a /debug/cpuwork body, at most maxDebugBody bytes,
// whether or not the sampler has taken a sample yet.
func decodeDebug(r io.Reader) (*schedstat.Sample, *ExecutorView, error) {
	var rep struct {
		Sample   schedstat.Sample `json:"sample"`
		Executor json.RawMessage  `json:"executor"`
	}
	if err := json.NewDecoder(capped(r, maxDebugBody, "/debug/cpuwork")).Decode(&rep); err != nil {
		return nil, nil, err
	}
	return &rep.Sample, parseExecutorView(rep.Executor), nil
}

// ExecutorView is what the target's executor shows at /debug/cpuwork
// (cpuwork.Executor.Stats): per class, where its accounted tasks' time
// went, and its slowest accounted tasks.
type ExecutorView struct {
	Slots int `json:"slots"` // the executor's slots (Stats.Slots)
	// Free and Queued are its free slots and its tasks waiting for one,
	// when /debug/cpuwork was read; Submitted and Shed its submissions
	// and the refusals among them (Stats: Rejected) since it started;
	// WindowSubmitted and WindowShed the same over the window (read at
	// its start and end; 0 when the start's read failed).
	Free            int            `json:"free"`
	Queued          int            `json:"queued"`
	Submitted       uint64         `json:"submitted"`
	Shed            uint64         `json:"shed"`
	WindowSubmitted uint64         `json:"window_submitted"`
	WindowShed      uint64         `json:"window_shed"`
	Classes         []ClassView    `json:"classes"`
	SlowTasks       []account.Task `json:"slow_tasks"`
}

// ClassView is one class's accounted latency: P99 of each part over its
// accounted tasks, and the class's latency p99 (queue wait + slot time).
type ClassView struct {
	Class      string                          `json:"class"`
	Accounted  uint64                          `json:"accounted"`
	PartsP99   [account.NumParts]time.Duration `json:"parts_p99_ns"`
	LatencyP99 time.Duration                   `json:"latency_p99_ns"`
}

// parseExecutorView reads cpuwork.Executor.Stats's JSON; nil when raw is
// not that (an executor served another way, or none).
func parseExecutorView(raw json.RawMessage) *ExecutorView {
	if len(raw) == 0 {
		return nil
	}
	var d cpuwork.Stats
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil
	}
	v := &ExecutorView{Slots: d.Slots, Free: d.Free, SlowTasks: d.SlowTasks}
	for _, cs := range d.Classes {
		v.Queued += cs.Queued
		v.Submitted += cs.Submitted
		v.Shed += cs.Rejected
		if cs.Accounted == 0 {
			continue
		}
		cv := ClassView{Class: cs.Class.String(), Accounted: cs.Accounted, LatencyP99: cs.QueueWait.P99 + cs.SlotTime.P99}
		for p := range cs.Parts {
			cv.PartsP99[p] = cs.Parts[p].P99
		}
		v.Classes = append(v.Classes, cv)
	}
	if v.Slots == 0 && len(v.Classes) == 0 && len(v.SlowTasks) == 0 {
		return nil // not an executor's Stats
	}
	return v
}

// throttleImpact is the evidence line of what throttling added to the
// target executor's latency-sensitive classes ("" without an executor
// view that accounted throttling).
func throttleImpact(w *Window) string {
	var parts []string
	for _, cv := range latencyClasses(w) {
		parts = append(parts, fmt.Sprintf("%v to the p99 of %s (p99 of the throttled part over %d accounted tasks, whose latency p99 is %v)",
			short(cv.PartsP99[account.Throttled]), cv.Class, cv.Accounted, short(cv.LatencyP99)))
	}
	if len(parts) == 0 {
		return ""
	}
	return "throttling added " + strings.Join(parts, "; ") + " (/debug/cpuwork, cpuwork.Executor.Stats)"
}

// latencyClasses are the target executor's accounted Critical and
// Interactive classes.
func latencyClasses(w *Window) []ClassView {
	if w.Executor == nil {
		return nil
	}
	var out []ClassView
	for _, cv := range w.Executor.Classes {
		if (cv.Class == "critical" || cv.Class == "interactive") && cv.Accounted > 0 {
			out = append(out, cv)
		}
	}
	return out
}

// throttlingImpact judges throttling by what it added to the latency of
// the target executor's latency-sensitive classes, measured per task
// (cpuwork.Options.Account), rather than by the share of throttled
// periods: a warning when the p99 of the throttled part costs the
// class's latency p99 (throttle.Costs: at least a quarter of it and a
// millisecond; the executor's pacer judges a throttled period's pause
// against the objective with the same package, and acts only where the
// pause would miss it: throttle.Misses), critical at impactCritical.
func throttlingImpact(w *Window) (Finding, bool) {
	worst, worstShare := ClassView{}, 0.0
	for _, cv := range latencyClasses(w) {
		th := cv.PartsP99[account.Throttled]
		if cv.LatencyP99 <= 0 || !throttle.Costs(th, cv.LatencyP99) {
			continue
		}
		if share := float64(th) / float64(cv.LatencyP99); share > worstShare {
			worst, worstShare = cv, share
		}
	}
	if worstShare == 0 {
		return Finding{}, false
	}
	sev := Warning
	if worstShare >= impactCritical {
		sev = Critical
	}
	th := worst.PartsP99[account.Throttled]
	return Finding{ID: "throttling-impact", Severity: sev,
		Summary:  fmt.Sprintf("throttling added %v to the p99 of %s tasks (%.0f%% of their %v p99)", short(th), worst.Class, 100*worstShare, short(worst.LatencyP99)),
		Evidence: []string{throttleImpact(w), fmt.Sprintf("%d of %d CFS periods throttled in the window (%s/cpu.stat)", w.Throttling.ThrottledPeriods, w.Throttling.Periods, w.LimitDir)},
		Fix:      fmt.Sprintf("keep the process's parallel CPU work under its %.2f-core quota (a cpuwork.Executor with zero Options paces the fractional core where a throttled period's pause would miss the work's latency target; set the target, or Options.Quota: QuotaStrict to pace whatever it is; native thread pools sized to the slots), or raise the limit to whole cores", w.Budget.Cores),
	}, true
}

// Thresholds. They are deliberately coarse: a finding must mean that
// latency or CPU is being lost, not that a number moved. docs/doctor.md
// gives each one's reason.
const (
	throttledWarn     = 0.05 // share of periods throttled
	throttledCritical = 0.25
	minPeriods        = 20   // fewer periods with runnable threads: too few to judge a share
	runDelayWarn      = 0.10 // run delay per second of wall time (cores' worth of waiting)
	runDelayCritical  = 0.50
	// run delay as a share of the CPU budget: losing a fifth of it is
	// never healthy, half of it is critical, however short each wait
	lostShareWarn     = 0.20
	lostShareCritical = 0.50
	// a wake-up that waits this long on average for a CPU is starvation;
	// an I/O server's threads wait ~0.1 ms per wake-up on a busy host
	perSliceWarn     = 500 * time.Microsecond
	perSliceCritical = 2 * time.Millisecond
	atBudget         = 0.85 // CPU used / budget above which the process is using its budget
	// throttling judged by its impact on the executor's accounted tasks:
	// the p99 of their throttled part against their latency p99 (a
	// warning from throttle.Costs' quarter)
	impactCritical   = 0.50
	capacityWarn     = 0.90 // CPU used / budget for the whole window: at capacity
	demandOverQuota  = 0.95 // CPU used / quota: the extra Ps' demand reaches the quota
	runnablePerPWarn = 4.0
	schedP99Warn     = 5 * time.Millisecond
	timerP99Warn     = 5 * time.Millisecond
	gcShareWarn      = 0.25
	gcPauseP99Warn   = 10 * time.Millisecond
	// median answer to a trivial request: Go's sysmon polls the network
	// at most every 10 ms while every P is busy (runtime/proc.go, sysmon),
	// so a server whose Ps are all busy answers in ~10 ms
	slowAnswer = 5 * time.Millisecond
	// a slow answer or a late timer is the process's own (its Ps busy)
	// only while it uses at least this share of the cores its Ps can use
	// (busyCores): an idle process that answers slowly, or whose timer
	// fires late, waits for a CPU another takes
	busyShare = 0.5
)

// psBusy reports whether the process's Ps were busy in the runtime
// sample's interval: it used at least busyShare of the cores its Ps can
// use (the sample's GOMAXPROCS where the window's is not known). A timer
// that fires late in a process whose Ps idle waited for a CPU the kernel
// gave to something else, not for a P. A sample without an interval
// cannot tell: busy.
func psBusy(w *Window, s *schedstat.Sample) bool {
	if s.Interval <= 0 {
		return true
	}
	ps := busyCores(w)
	if ps <= 0 {
		ps = float64(s.GOMAXPROCS)
	}
	return s.CPU.Seconds()/s.Interval.Seconds() >= busyShare*ps
}

// busyCores is the cores the process's Ps can use: GOMAXPROCS (when
// known) within the budget.
func busyCores(w *Window) float64 {
	c := w.Budget.Cores
	if w.GOMAXPROCS > 0 && (c <= 0 || float64(w.GOMAXPROCS) < c) {
		c = float64(w.GOMAXPROCS)
	}
	return c
}

func diagnose(w *Window) []Finding {
	out := findings(w)
	if runsCpuwork(w) != "" {
		// A program that runs cpuwork is never told to adopt it: where a
		// fix names the executor, it is the program's own.
		for i := range out {
			out[i].Fix = strings.ReplaceAll(out[i].Fix, "a cpuwork.Executor", "the program's cpuwork executor")
		}
	}
	return out
}

// findings is diagnose's list, before its fixes are fitted to a program
// that runs cpuwork.
func findings(w *Window) []Finding {
	b := w.Budget
	tv := throttlingOf(w)
	out := quotaFindings(w, tv)
	if f, ok := runDelayFinding(w, tv.throttled); ok {
		out = append(out, f)
	}
	if f, ok := capacityFinding(w); ok {
		out = append(out, f)
	}
	if f, ok := probeFinding(w); ok {
		out = append(out, f)
	}
	out = append(out, runtimeFindings(w)...)
	if f, ok := throttlingImpact(w); ok {
		out = append(out, f)
	}
	out = traceFinding(w, out)
	// Nothing at warning or above is healthy; notes (info findings, such
	// as Go's own GOMAXPROCS above a fractional quota) follow it.
	if !slices.ContainsFunc(out, func(f Finding) bool { return f.Severity != Info }) {
		gmp := strconv.Itoa(w.GOMAXPROCS)
		if w.GOMAXPROCSUnknown != "" {
			gmp = "unknown (" + w.GOMAXPROCSUnknown + ")"
		}
		ev := []string{fmt.Sprintf("budget %.2f cores (%s), GOMAXPROCS %s; CPU used %.2f cores", b.Cores, b.Source, gmp, w.CPUCores)}
		if w.Kernel.Count > 0 {
			ev = append(ev, fmt.Sprintf("run delay %v in %v", w.Kernel.RunDelay.Round(time.Millisecond), w.Duration.Round(time.Millisecond)))
		}
		if w.Throttling.Periods > 0 {
			ev = append(ev, tv.evidence)
		}
		rank(out)
		return append([]Finding{{ID: "healthy", Severity: Info, Summary: "nothing found that loses CPU or latency in this window", Evidence: ev, Fix: "none"}}, out...)
	}
	rank(out)
	return out
}

// throttling is the window's throttling as the findings judge it.
type throttling struct {
	share      float64 // throttled periods over periods
	judge      bool    // enough periods to judge the share
	frozen     float64 // throttled time as a share of the budget
	throttled  bool    // throttled enough to be a finding
	evidence   string
	quotaWhere string // where an ancestor's quota is set, shared by siblings ("": the leaf's)
}

// throttlingOf is w's throttling, judged.
func throttlingOf(w *Window) throttling {
	b := w.Budget
	thr := w.Throttling
	var t throttling
	if thr.Periods > 0 {
		t.share = float64(thr.ThrottledPeriods) / float64(thr.Periods)
	}
	t.judge = thr.Periods >= minPeriods
	t.evidence = fmt.Sprintf("%d of %d CFS periods throttled (%.0f%%), %v frozen, in %v (%s/cpu.stat)",
		thr.ThrottledPeriods, thr.Periods, 100*t.share, thr.ThrottledTime.Round(time.Millisecond), w.Duration.Round(time.Millisecond), w.LimitDir)
	if !t.judge && thr.Periods > 0 {
		t.evidence += fmt.Sprintf("; too few periods to judge a share (fewer than %d had runnable threads)", minPeriods)
	}
	if l, ok := b.Limiting(); ok && l.Period > 0 && w.Duration < l.Period {
		t.evidence += fmt.Sprintf("; the window is shorter than one quota period (%v): throttling may not show in it", l.Period)
	}
	if l, ok := b.Limiting(); ok && !l.Leaf {
		t.quotaWhere = fmt.Sprintf("the quota is set on the ancestor cgroup %s, not the process's own (%s)", l.Dir, b.CgroupDir)
		if w.Siblings > 0 {
			t.quotaWhere += fmt.Sprintf(", and %d sibling cgroups below it share it: their CPU counts against it too", w.Siblings)
		}
	}
	// Throttled time as a share of the budget: cpu.stat's throttled time
	// sums each CPU's frozen run queue, so per second of wall it is cores'
	// worth of frozen time, comparable with the budget's cores, however
	// few periods the window saw.
	if w.Duration > 0 && b.Cores > 0 {
		t.frozen = thr.ThrottledTime.Seconds() / w.Duration.Seconds() / b.Cores
	}
	if thr.ThrottledTime > 0 {
		t.evidence += fmt.Sprintf("; frozen time %.0f%% of the %.2f-core budget", 100*t.frozen, b.Cores)
	}
	t.throttled = (t.judge && t.share >= throttledWarn) || t.frozen >= lostShareWarn
	return t
}

// quotaFindings are GOMAXPROCS above the quota and the cgroup throttled.
func quotaFindings(w *Window, t throttling) []Finding {
	var out []Finding
	b := w.Budget
	throttledShare, judgeThrottling, frozenShare, throttled := t.share, t.judge, t.frozen, t.throttled
	thrEvidence, quotaWhere := t.evidence, t.quotaWhere
	if _, quota := b.Limiting(); quota && w.GOMAXPROCS > 0 && float64(w.GOMAXPROCS) > b.Cores+1e-9 {
		ev := []string{
			fmt.Sprintf("GOMAXPROCS %d (%s)", w.GOMAXPROCS, w.GOMAXPROCSSource),
			fmt.Sprintf("CPU quota %.2f cores (%s, source %s)", b.Cores, b.SourceDir, b.Source),
			thrEvidence,
			fmt.Sprintf("CPU used %.2f cores", w.CPUCores),
		}
		if quotaWhere != "" {
			ev = append(ev, quotaWhere+" (the Go runtime reads only the leaf's quota)")
		}
		n := budget.Whole(b.Cores, false)
		if throttled || w.CPUCores >= demandOverQuota*b.Cores {
			sev := Warning
			if throttledShare >= throttledCritical && judgeThrottling {
				sev = Critical
			}
			out = append(out, Finding{ID: "gomaxprocs-above-quota", Severity: sev,
				Summary:  fmt.Sprintf("GOMAXPROCS %d is above the %.2f-core quota and the work uses it: busy goroutines spend the quota early in each period and the kernel freezes the whole process for the rest", w.GOMAXPROCS, b.Cores),
				Evidence: ev,
				Fix:      fmt.Sprintf("run at most %d CPU-bound goroutines at once: GOMAXPROCS=%d in the environment (or maxprocs.Set(maxprocs.Options{})), or a cpuwork.Executor, whose slots follow the quota without throttling; or raise the CPU limit to %d", n, n, w.GOMAXPROCS),
			})
		} else {
			out = append(out, Finding{ID: "gomaxprocs-above-quota", Severity: Info,
				Summary:  fmt.Sprintf("GOMAXPROCS %d is above the %.2f-core quota, %s, but nothing was throttled and the CPU used stayed below the quota in this window: it costs only when more goroutines than the quota run CPU-bound work at once", w.GOMAXPROCS, b.Cores, whyAbove(w)),
				Evidence: ev,
				Fix:      "none now; if the service gets CPU-bound bursts, bound them (a cpuwork.Executor) or set GOMAXPROCS to floor(quota)",
			})
		}
	}
	if throttled {
		sev := Warning
		if (judgeThrottling && throttledShare >= throttledCritical) || frozenShare >= lostShareCritical {
			sev = Critical
		}
		ev := []string{thrEvidence, fmt.Sprintf("CPU used %.2f cores of a %.2f-core quota", w.CPUCores, b.Cores)}
		if quotaWhere != "" {
			ev = append(ev, quotaWhere)
		}
		if imp := throttleImpact(w); imp != "" {
			ev = append(ev, imp)
		}
		fix := fmt.Sprintf("keep parallel CPU work under the quota (a cpuwork.Executor uses the fractional core without throttling; or GOMAXPROCS = floor(quota) = %d), or raise the limit; every throttled period adds up to %v to the latency of whatever runs then", budget.Whole(b.Cores, false), periodOf(b))
		if n := budget.Whole(b.Cores, false); b.Cores-float64(n) < 0.01 && w.GOMAXPROCS > n {
			// A whole quota with Ps beyond it: the executor's slots fill
			// the quota and the rest of the process takes it over.
			fix += fmt.Sprintf("; with this whole quota and GOMAXPROCS %d, work outside an executor's %d slots (handlers, GC) still takes the process over it: cpuwork.Options{Quota: cpuwork.QuotaStrict} paces the last slot so the whole process stays under the quota, at a cost in the slots' own latency near capacity (docs/architecture.md, \"Whole quotas\")", w.GOMAXPROCS, n)
		}
		out = append(out, Finding{ID: "cpu-throttled", Severity: sev,
			Summary:  fmt.Sprintf("the cgroup that sets the CPU quota was throttled in %.0f%% of its periods", 100*throttledShare),
			Evidence: ev,
			Fix:      fix,
		})
	}
	return out
}

// runDelayFinding judges the run delay: time the threads were runnable
// but the kernel ran something else, per wake-up (a thread that waits
// 0.1 ms each time it wakes is not starved, however many threads add it
// up). Throttled time shows up there too (a throttled thread stays
// runnable), so throttling explains it first.
func runDelayFinding(w *Window, throttled bool) (Finding, bool) {
	b := w.Budget
	if w.Duration > 0 && w.Kernel.Count > 0 && !throttled {
		perSec := w.Kernel.RunDelay.Seconds() / w.Duration.Seconds()
		perSlice := w.Kernel.RunDelay / time.Duration(max(w.Kernel.Timeslices, 1))
		// Judged by its size: the share of the CPU budget the run delay
		// takes (cores' worth of waiting over cores granted), whatever the
		// wake-ups; and, below that, by the wait per wake-up.
		lost := 0.0
		if b.Cores > 0 {
			lost = perSec / b.Cores
		}
		if lost >= lostShareWarn || (perSec >= runDelayWarn && perSlice >= perSliceWarn) {
			sev := Warning
			if lost >= lostShareCritical || (perSec >= runDelayCritical && perSlice >= perSliceCritical) {
				sev = Critical
			}
			kev := fmt.Sprintf("run delay %v and on-CPU %v over %d threads and %d wake-ups in %v: %.2f s per second, %.0f%% of the %.2f-core budget, %v per wake-up (/proc/PID/task/*/schedstat)",
				w.Kernel.RunDelay.Round(time.Millisecond), w.Kernel.OnCPU.Round(time.Millisecond), w.Kernel.Count, w.Kernel.Timeslices, w.Duration.Round(time.Millisecond), perSec, 100*lost, b.Cores, short(perSlice)) + rough(int64(w.Kernel.Timeslices), "wake-ups")
			// Its own threads outnumber its cores: while it uses its whole
			// budget, or by twice over (then others may compete too, but
			// the process would wait for itself without them).
			if w.RunnableThreads > b.Cores+0.5 && (w.CPUCores >= atBudget*b.Cores || w.RunnableThreads >= 2*b.Cores) {
				return Finding{ID: "self-oversubscribed", Severity: sev,
					Summary: fmt.Sprintf("the process's own threads compete for its %.2f cores: %.1f runnable on average, using %.2f cores", b.Cores, w.RunnableThreads, w.CPUCores),
					Evidence: []string{kev,
						fmt.Sprintf("CPU used %.2f cores of a %.2f-core budget (%s); %.1f threads runnable on average (sampled /proc/PID/task/*/stat)", w.CPUCores, b.Cores, b.Source, w.RunnableThreads),
						fmt.Sprintf("GOMAXPROCS %d (%s)", w.GOMAXPROCS, w.GOMAXPROCSSource)},
					Fix: fmt.Sprintf("run at most %d CPU-bound threads at once: GOMAXPROCS at most the budget, and native thread pools (ONNX Runtime intra-op threads, OpenMP, BLAS) sized to it too — or a cpuwork.Executor whose slots each lease one native thread", max(budget.Whole(b.Cores, false), 1)),
				}, true
			} else {
				return Finding{ID: "os-starvation", Severity: sev, lost: lost,
					Summary: fmt.Sprintf("the process's threads waited %.2f s per second (%v per wake-up) for a CPU the kernel gave to something else", perSec, short(perSlice)),
					Evidence: []string{kev,
						fmt.Sprintf("CPU used %.2f cores; budget %.2f cores (%s); no throttling to explain it, and the process is below its budget", w.CPUCores, b.Cores, b.Source)},
					Fix: "another process (a sidecar, a neighbour, a CPU hog) or this process's own SCHED_IDLE/nice threads compete for the same CPUs: give the service its own CPUs (cpuset, Kubernetes static CPU manager), a larger cpu.weight/shares than the neighbour (cpuwork run --weight), or put the neighbour in an idle cgroup (cpu.idle); within the process leave cpuwork's Options.Batch.Demote off",
				}, true
			}
		}
	}
	return Finding{}, false
}

// runtimeFindings judge the Go runtime's view (/debug/cpuwork): run
// queues, timers and the GC.
func runtimeFindings(w *Window) []Finding {
	var out []Finding
	if s := w.Runtime; s != nil {
		if s.GoroutineStates && s.GOMAXPROCS > 0 {
			perP := float64(s.Runnable) / float64(s.GOMAXPROCS)
			if perP >= runnablePerPWarn && s.SchedLatency.P99 >= schedP99Warn {
				out = append(out, Finding{ID: "oversubscribed", Severity: Warning,
					Summary: fmt.Sprintf("%.0f runnable goroutines per P wait in Go's run queues: every CPU-bound task is time-sliced with the others and finishes late", perP),
					Evidence: []string{
						fmt.Sprintf("%d runnable goroutines on %d Ps (/sched/goroutines/runnable)", s.Runnable, s.GOMAXPROCS),
						fmt.Sprintf("scheduling latency p99 %v, p50 %v over %d events in %v (/sched/latencies)", short(s.SchedLatency.P99), short(s.SchedLatency.P50), s.SchedLatency.Count, short(s.Interval)) + rough(int64(s.SchedLatency.Count), "events"),
					},
					Fix: bound(w, "bound CPU-bound concurrency to the budget: run the work through a cpuwork.Executor (Do/Go with a class; slots = floor(quota)) so excess requests queue, with priorities, instead of sharing the Ps"),
				})
			}
		}
		if q := s.TimerLateness; q.Count > 0 && q.P99 >= timerP99Warn && psBusy(w, s) {
			out = append(out, Finding{ID: "timer-starvation", Severity: Warning,
				Summary:  fmt.Sprintf("a timer fires %v late at p99: busy Ps do not run timers and the netpoller until a goroutine yields", short(q.P99)),
				Evidence: []string{fmt.Sprintf("timer canary lateness p50 %v, p99 %v, max %v over %d wake-ups in %v", short(q.P50), short(q.P99), short(q.Max), q.Count, short(s.Interval)) + rough(int64(q.Count), "wake-ups"), "Go issue 38860 (timers wait behind non-yielding goroutines); /sched/latencies does not show it (Go issue 45632)"},
				Fix:      loopFix(w, "call cpuwork.Checkpoint(ctx) inside long CPU loops (it yields for due timers every ~40 µs when every P is busy, ~4 ns a call otherwise), or runtime.Gosched() every ~100 µs of work"),
			})
		}
		if s.CPU > 0 {
			share := s.GCCPU.Seconds() / s.CPU.Seconds()
			if share >= gcShareWarn || s.GCPause.P99 >= gcPauseP99Warn {
				out = append(out, Finding{ID: "gc-pressure", Severity: Warning,
					Summary:  fmt.Sprintf("the GC took %.0f%% of the process's CPU", 100*share),
					Evidence: []string{fmt.Sprintf("GC CPU %v of %v CPU in %v (/cpu/classes/gc/total)", s.GCCPU.Round(time.Millisecond), s.CPU.Round(time.Millisecond), s.Interval), fmt.Sprintf("stop-the-world GC pauses p99 %v over %d (/sched/pauses/total/gc)", s.GCPause.P99, s.GCPause.Count) + rough(int64(s.GCPause.Count), "pauses")},
					Fix:      "allocate less on the hot path (pool buffers), or trade memory for CPU: raise GOGC, or set GOMEMLIMIT near the container's memory limit with a higher GOGC",
				})
			}
		}
	}
	return out
}

// traceFinding adds the execution trace's run-queue waits to out: to the
// oversubscribed finding when there is one, else as one of its own when
// the waits are long.
func traceFinding(w *Window, out []Finding) []Finding {
	if tv := w.Trace; tv != nil && tv.Procs > 0 {
		perP := tv.MeanRunnable / float64(tv.Procs)
		ev := fmt.Sprintf("execution trace (/debug/pprof/trace, %v): %d runnable→running waits, p50 %v, p99 %v, max %v; on average %.1f goroutines runnable per P (%d Ps ran)",
			short(tv.Duration), tv.Waits, short(tv.WaitP50), short(tv.WaitP99), short(tv.WaitMax), perP, tv.Procs) + rough(int64(tv.Waits), "waits")
		if pv := w.Profile; pv != nil && pv.Samples > 0 {
			ev += fmt.Sprintf("; CPU profile: %.0f%% of %d samples in the scheduler (runtime.schedule/findRunnable), %.0f%% in runtime.asyncPreempt (preempted work, not counted as scheduler)", 100*pv.SchedulerShare, pv.Samples, 100*pv.PreemptShare)
		}
		if i := slices.IndexFunc(out, func(f Finding) bool { return f.ID == "oversubscribed" }); i >= 0 {
			out[i].Evidence = append(out[i].Evidence, ev)
		} else if perP >= 1 && tv.WaitP99 >= schedP99Warn {
			// The trace's run queue is a lower bound: the runtime records a
			// goroutine's state only once the goroutine shows up in the trace
			// (a goroutine runnable from start to end never does), so one
			// goroutine per P plus a p99 wait above the threshold is enough.
			out = append(out, Finding{ID: "oversubscribed", Severity: Warning,
				Summary:  fmt.Sprintf("goroutines wait up to %v (p99) in Go's run queues, %.0f or more per P on average: CPU-bound tasks are time-sliced with each other and finish late", short(tv.WaitP99), perP),
				Evidence: []string{ev},
				Fix:      bound(w, "bound CPU-bound concurrency to the budget: run the work through a cpuwork.Executor (Do/Go with a class; slots = floor(quota)) so excess requests queue, with priorities, instead of sharing the Ps"),
			})
		}
	}
	return out
}

// causeOrder ranks findings by what to fix first: the configuration that
// makes the kernel throttle; the process's own causes (GC, too many
// runnable goroutines or threads, loops that never yield); throttling by
// the process's own demand; the late answers those causes explain;
// another process's competition; the budget used up.
var causeOrder = []string{
	"gomaxprocs-above-quota",
	"gc-pressure", "self-oversubscribed", "oversubscribed", "timer-starvation",
	"cpu-throttled", "throttling-impact",
	"unresponsive", "slow-to-answer",
	"os-starvation", "at-capacity",
	"slow-to-send-headers", "not-answered",
}

// rank orders findings: every warning or critical before any info;
// os-starvation where another process takes half the budget or more
// right after the configuration (one critical by its wait per wake-up
// alone keeps its place after the process's own causes); then
// causeOrder. The first finding is the one to fix first.
func rank(fs []Finding) {
	pos := func(f Finding) int {
		if f.ID == "os-starvation" && f.lost >= lostShareCritical {
			return 0
		}
		if i := slices.Index(causeOrder, f.ID); i >= 0 {
			return i
		}
		return len(causeOrder)
	}
	slices.SortStableFunc(fs, func(a, b Finding) int {
		ai, bi := a.Severity == Info, b.Severity == Info
		switch {
		case ai != bi && ai:
			return 1
		case ai != bi:
			return -1
		}
		return pos(a) - pos(b)
	})
}

func periodOf(b budget.Budget) time.Duration {
	if l, ok := b.Limiting(); ok && l.Period > 0 {
		return l.Period
	}
	return 100 * time.Millisecond
}

// Text writes the result for a person.
func (r *Result) Text(out io.Writer) {
	w := r.Window
	fmt.Fprintf(out, "cpuwork doctor: pid %d over %v\n", r.PID, w.Duration.Round(time.Millisecond))
	gmp := strconv.Itoa(w.GOMAXPROCS)
	if w.GOMAXPROCSUnknown != "" {
		gmp = "unknown (" + w.GOMAXPROCSUnknown + ")"
	}
	fmt.Fprintf(out, "  budget: %.2f cores (%s%s); GOMAXPROCS %s; CPU used %.2f cores\n", w.Budget.Cores, w.Budget.Source, dirSuffix(w.Budget.SourceDir), gmp, w.CPUCores)
	if w.Duration > 0 {
		delay := fmt.Sprintf("%.3f s", w.Kernel.RunDelay.Seconds()/w.Duration.Seconds())
		if w.KernelUnknown != "" {
			delay = "unknown (" + w.KernelUnknown + ")"
		}
		throttled := fmt.Sprintf("%.3f s", w.Throttling.ThrottledTime.Seconds()/w.Duration.Seconds())
		switch {
		case w.ThrottlingUnknown != "":
			throttled = "unknown (" + w.ThrottlingUnknown + ")"
		case w.LimitDir == "":
			throttled = "none (no CPU quota)"
		}
		fmt.Fprintf(out, "  lost time per second of wall, summed over the threads or goroutines that waited (so it can pass 1 s): kernel run delay %s, throttled %s", delay, throttled)
		if t := w.Trace; t != nil && t.Duration > 0 {
			fmt.Fprintf(out, ", Go run queues %.3f s (execution trace)", t.Runnable.Seconds()/t.Duration.Seconds())
		}
		if s := w.Runtime; s != nil && s.Interval > 0 {
			fmt.Fprintf(out, ", Go run queues %.3f s, GC stop-the-world %.3f s (last %v sample)",
				s.SchedLatency.Sum.Seconds()/s.Interval.Seconds(), s.GCPause.Sum.Seconds()/s.Interval.Seconds(), s.Interval)
		}
		fmt.Fprintln(out)
	}
	if ex := w.Executor; ex != nil && len(ex.SlowTasks) > 0 {
		fmt.Fprintf(out, "  the executor's slowest accounted tasks, where their time went (/debug/cpuwork):\n")
		for i, a := range ex.SlowTasks {
			if i == 3 {
				break
			}
			fmt.Fprintf(out, "    %s %v:", a.Class, short(a.Wall))
			for p, d := range a.Parts {
				if d > 0 {
					fmt.Fprintf(out, " %s %v", account.Part(p), short(d))
				}
			}
			if a.Partial != "" {
				fmt.Fprintf(out, " (partial: %s)", a.Partial)
			}
			fmt.Fprintln(out)
		}
	}
	for _, f := range r.Findings {
		fmt.Fprintf(out, "\n[%s] %s: %s\n", strings.ToUpper(string(f.Severity)), f.ID, f.Summary)
		for _, e := range f.Evidence {
			fmt.Fprintf(out, "    evidence: %s\n", e)
		}
		fmt.Fprintf(out, "    fix: %s\n", f.Fix)
	}
	for _, u := range r.Unread {
		fmt.Fprintf(out, "\nnot read: %s\n", u)
	}
	for _, u := range r.NotServed {
		fmt.Fprintf(out, "\nnot served: %s\n", u)
	}
}

func dirSuffix(d string) string {
	if d == "" {
		return ""
	}
	return " " + d
}

// short rounds d to three significant digits for reading.
func short(d time.Duration) time.Duration {
	for r := time.Duration(1); r < time.Hour; r *= 10 {
		if d < 1000*r {
			return d.Round(r)
		}
	}
	return d
}
