package doctor

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cpuwork/cpuwork/budget"
	"github.com/cpuwork/cpuwork/cgroup"
	"github.com/cpuwork/cpuwork/cmd/cpuwork/internal/judge"
)

// ProveConfig is a command to diagnose and, where the doctor's top fix
// can be applied from outside, to run again with it, alternated with the
// command as is, to show the fix working before anyone deploys it.
type ProveConfig struct {
	// Cmd is the program and its arguments. It should be the program
	// itself (or exec it): the doctor watches the process it starts.
	Cmd []string
	// URL, when not empty, is read as doctor --url reads it, in every
	// window (the Go scheduling latency figure comes from its trace).
	URL string
	// Load, when not empty, is a shell command run during each window
	// (a load generator against the program), outside the program's
	// cgroup where the doctor can make one of its own (LoadGroup); its
	// environment carries the program's PID as CPUWORK_TARGET_PID. Its
	// output's p99 latency and throughput (hey's or vegeta's summary, or
	// a JSON line with "p99_ms" and "rps") are figures of the proof, and
	// what its verdict rests on.
	Load string
	// LoadGroup makes the cgroup the load command runs in (its
	// cgroup.procs file) and a function that removes it; nil: a group
	// with no quota below the hierarchy's root (cgroup.New, Parent
	// "/cpuwork"). When it fails the load runs in the doctor's own
	// cgroup, and the proof says so.
	LoadGroup func() (procs string, remove func() error, err error)
	// Duration is each window; 0: 3 s. Pairs is the number of
	// alternated rounds; 0: 5. Settle is the time between a start and
	// its window; 0: 1 s.
	Duration time.Duration
	Pairs    int
	Settle   time.Duration
	// Progress, when not nil, gets a line per window.
	Progress io.Writer
	// started is called with each process started (tests place it in a
	// cgroup); nil: nothing.
	started func(pid int) error
	// loadProcs is the load's cgroup.procs file ("": the doctor's own
	// cgroup).
	loadProcs string
}

// Fix is a change the doctor applies from outside: variables added to
// the command's environment.
type Fix struct {
	What string   `json:"what"`
	Env  []string `json:"env"`
}

// Figure is one figure of a proof: its medians as is and fixed, the
// geometric mean of the per-round ratios fixed/as-is with its 95 %
// interval, the A/A control's (as is against as is again), the margin
// and the three-way verdict (bench's rule).
type Figure struct {
	Name string `json:"name"`
	Unit string `json:"unit"`
	// Felt marks a figure of what the program's users feel (the load's
	// latency and throughput, the probes' latency): the verdict rests on
	// these; the others are the mechanism.
	Felt     bool          `json:"felt,omitempty"`
	Higher   bool          `json:"higher_is_better,omitempty"`
	AsIs     float64       `json:"as_is"`
	Fixed    float64       `json:"fixed"`
	Ratio    float64       `json:"ratio"`
	Lo       float64       `json:"lo"`
	Hi       float64       `json:"hi"`
	AA       float64       `json:"aa"`
	Margin   float64       `json:"margin"`
	Verdict  judge.Verdict `json:"verdict"`
	finding  bool          // the figure the finding rests on
	floor    float64       // added to both sides of a ratio: the figure's resolution
	asIs, aa []float64
	fixed    []float64
}

// Proof is what Prove found.
type Proof struct {
	Diagnosis *Result `json:"diagnosis"`
	// Fix is the change proved; nil when there is nothing to prove
	// (Refusal says why).
	Fix     *Fix     `json:"fix,omitempty"`
	Refusal string   `json:"refusal,omitempty"`
	Figures []Figure `json:"figures"`
	// Verdict rests on what the users feel (Figure.Felt): worse when any
	// such figure is worse beyond the margin, else the verdict of the
	// first of them (the load's p99, else the probes'). Without --load or
	// --url it is empty: the mechanism's figures alone prove no benefit
	// (NoVerdict says so).
	Verdict   judge.Verdict `json:"verdict,omitempty"`
	NoVerdict string        `json:"no_verdict,omitempty"`
	// LoadWhere says where the load command ran.
	LoadWhere string        `json:"load_where,omitempty"`
	Pairs     int           `json:"pairs"`
	Elapsed   time.Duration `json:"elapsed_ns"`
}

// ErrExitedAtOnce is returned when the command ends before its first
// window: there is nothing running to diagnose.
var ErrExitedAtOnce = errors.New("doctor: the command exited before it could be diagnosed")

// Prove runs cfg.Cmd as is and diagnoses it; when the top finding's fix
// can be applied from outside (GOMAXPROCS from the CPU budget, in the
// command's environment), it runs the command cfg.Pairs times as is, as
// is again (the A/A control) and with the fix, in a shuffled order per
// round, and judges each figure the finding rests on. A healthy program
// has nothing to prove; a fix that needs code is named, not proved
// (Refusal).
func Prove(cfg ProveConfig) (*Proof, error) {
	if len(cfg.Cmd) == 0 {
		return nil, errors.New("doctor: --prove needs a command: cpuwork doctor --prove -- CMD [ARGS]")
	}
	if _, err := exec.LookPath(cfg.Cmd[0]); err != nil {
		return nil, fmt.Errorf("doctor: %w", err)
	}
	if cfg.Duration <= 0 {
		cfg.Duration = 3 * time.Second
	}
	if cfg.Pairs <= 0 {
		cfg.Pairs = 5
	}
	if cfg.Settle <= 0 {
		cfg.Settle = time.Second
	}
	begin := time.Now()
	p := &Proof{Figures: []Figure{}}
	first, err := cfg.window(nil, 5*time.Second)
	if err != nil {
		return nil, err
	}
	p.Diagnosis = first.res
	p.Fix, p.Refusal = fixFor(first.res)
	if p.Fix != nil {
		if k := setsItself(cfg.Cmd, p.Fix.Env); k != "" {
			p.Fix, p.Refusal = nil, fmt.Sprintf("the fix is %s in the command's environment, but the command sets %s itself (%s): set it in the doctor's environment instead (%s=... cpuwork doctor --prove -- PROGRAM)", p.Fix.What, k, strings.Join(cfg.Cmd, " "), k)
		}
	}
	if p.Fix == nil {
		p.Elapsed = time.Since(begin)
		return p, nil
	}
	figs := figuresFor(first.res, cfg) // cfg.Duration is set: the floors use it
	if cfg.Load != "" {
		mk := cfg.LoadGroup
		if mk == nil {
			mk = outsideGroup
		}
		procs, remove, err := mk()
		if err != nil {
			p.LoadWhere = fmt.Sprintf("in the doctor's own cgroup, competing with the program for its quota: no cgroup of its own (%v)", err)
		} else {
			defer remove()
			cfg.loadProcs = procs
			p.LoadWhere = "outside the program's cgroup, in " + filepath.Dir(procs) + " (no quota)"
		}
	}
	arms := []string{"as is", "as is again", "fixed"}
	for round := range cfg.Pairs {
		order := slices.Clone(arms)
		rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		got := map[string]*measured{}
		for _, arm := range order {
			var env []string
			if arm == "fixed" {
				env = p.Fix.Env
			}
			m, err := cfg.window(env, cfg.Duration)
			if err != nil {
				return nil, fmt.Errorf("doctor: round %d, %s: %w", round+1, arm, err)
			}
			got[arm] = m
			if cfg.Progress != nil {
				fmt.Fprintf(cfg.Progress, "[%d/%d] %s: %s\n", round+1, cfg.Pairs, arm, m.summary(figs))
			}
		}
		for i := range figs {
			f := &figs[i]
			f.asIs = append(f.asIs, got["as is"].value(f.Name))
			f.aa = append(f.aa, got["as is again"].value(f.Name))
			f.fixed = append(f.fixed, got["fixed"].value(f.Name))
		}
	}
	p.Pairs = cfg.Pairs
	for i := range figs {
		f := &figs[i]
		var ratios, aa []float64
		for k := range f.asIs {
			ratios = append(ratios, (f.fixed[k]+f.floor)/(f.asIs[k]+f.floor))
			aa = append(aa, (f.aa[k]+f.floor)/(f.asIs[k]+f.floor))
		}
		f.AsIs, f.Fixed = median(f.asIs), median(f.fixed)
		j := judge.JudgeOnce(ratios, aa, f.Higher)
		f.Ratio, f.Lo, f.Hi, f.AA, f.Margin, f.Verdict = j.Ratio, j.Lo, j.Hi, j.AA, j.Margin, j.Verdict
	}
	p.Figures = figs
	p.Verdict, p.NoVerdict = feltVerdict(figs)
	p.Elapsed = time.Since(begin)
	return p, nil
}

// feltVerdict is a proof's verdict from its figures: it rests on what
// the users feel — worse when any felt figure is worse, else the first
// felt figure's verdict; with no felt figure, none.
func feltVerdict(figs []Figure) (judge.Verdict, string) {
	var first *Figure
	for i := range figs {
		f := &figs[i]
		if !f.Felt {
			continue
		}
		if f.Verdict == judge.Worse {
			return judge.Worse, ""
		}
		if first == nil {
			first = f
		}
	}
	if first == nil {
		return "", "no verdict: without --load or --url the figures show the mechanism (throttling and run delay fall once GOMAXPROCS fits the quota, whatever the program's users feel), not a benefit; give --load a load generator's command, or --url"
	}
	return first.Verdict, ""
}

// outsideGroup makes the load command's cgroup: no quota, below the
// hierarchy's root, so that the load does not compete with the program
// for its quota (as a user's load generator, never in the server's
// container, does not).
func outsideGroup() (string, func() error, error) {
	g, err := cgroup.New(cgroup.Config{Name: cgroup.OwnedName("prove-load"), Parent: "/cpuwork"})
	if err != nil {
		return "", nil, err
	}
	return filepath.Join(g.Dir(), "cgroup.procs"), g.Remove, nil
}

// fixFor returns the fix of res's top finding that the doctor can apply
// from outside, or nil and why not.
func fixFor(res *Result) (*Fix, string) {
	f := res.Findings[0]
	w := res.Window
	if res.Worst() == Info || res.Worst() == Partial {
		return nil, "nothing to prove: nothing found that loses CPU or latency (" + f.ID + ")"
	}
	if res.Worst() == Inconclusive {
		return nil, "nothing to prove: the diagnosis is inconclusive (see \"not read\")"
	}
	switch f.ID {
	case "gomaxprocs-above-quota", "cpu-throttled", "self-oversubscribed":
		n := budget.Whole(w.Budget.Cores, false)
		if w.Go.GoVersion != "" && w.GOMAXPROCS > n {
			return &Fix{What: fmt.Sprintf("GOMAXPROCS=%d in the command's environment (the whole cores of its %.2f-core budget; it ran with GOMAXPROCS %d)", n, w.Budget.Cores, w.GOMAXPROCS),
				Env: []string{"GOMAXPROCS=" + strconv.Itoa(n)}}, ""
		}
		return nil, f.ID + ": the process runs no more goroutines at once than its budget's cores, so no setting from outside removes it: a larger budget, or admission in the code (a cpuwork.Executor: docs/guide.md)"
	}
	return nil, f.ID + ": its fix needs a change in the code (" + f.Fix + "): docs/guide.md shows how; --prove proves only what it can apply from outside"
}

// setsItself returns the name of a variable of env that cmd sets for
// its program itself (env NAME=VALUE PROGRAM), which would override the
// fix; "" when none.
func setsItself(cmd, env []string) string {
	if len(cmd) == 0 || !strings.HasSuffix(cmd[0], "env") {
		return ""
	}
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		for _, a := range cmd[1:] {
			if strings.HasPrefix(a, k+"=") {
				return k
			}
		}
	}
	return ""
}

// figuresFor lists the figures a proof measures for res's top finding.
func figuresFor(res *Result, cfg ProveConfig) []Figure {
	id := res.Findings[0].ID
	figs := []Figure{
		{Name: "run delay", Unit: "s per s", floor: 0.001, finding: id == "self-oversubscribed" || id == "os-starvation"},
	}
	if l, ok := res.Window.Budget.Limiting(); ok && res.Window.LimitDir != "" {
		// A share of the window's periods resolves one period in it.
		floor := max(l.Period.Seconds()/cfg.Duration.Seconds(), 0.01)
		// The verdict rests on the throttled time: what the freezes cost.
		// The share of periods is shown beside it (a busy loop at exactly
		// its quota overruns some periods' edges by microseconds).
		figs = append(figs, Figure{Name: "throttled periods", Unit: "share", floor: floor},
			Figure{Name: "throttled time", Unit: "s per s", floor: 0.001, finding: id == "gomaxprocs-above-quota" || id == "cpu-throttled"})
	}
	if cfg.URL != "" {
		figs = append(figs, Figure{Name: "Go scheduling latency p99", Unit: "ms", floor: 0.01})
	}
	if cfg.Load != "" {
		figs = append(figs, Figure{Name: "load p99", Unit: "ms", floor: 0.1, Felt: true},
			Figure{Name: "load throughput", Unit: "requests/s", floor: 0.1, Felt: true, Higher: true})
	}
	if cfg.URL != "" {
		figs = append(figs, Figure{Name: "probe median", Unit: "ms", floor: 0.1, Felt: true})
	}
	return figs
}

// measured is one window of one arm.
type measured struct {
	res     *Result
	loadP99 float64 // ms; NaN when the load command's output had none
	loadRPS float64 // requests/s; NaN when none
}

func (m *measured) value(name string) float64 {
	w := m.res.Window
	switch name {
	case "run delay":
		return w.Kernel.RunDelay.Seconds() / w.Duration.Seconds()
	case "throttled periods":
		if w.Throttling.Periods == 0 {
			return 0
		}
		return float64(w.Throttling.ThrottledPeriods) / float64(w.Throttling.Periods)
	case "throttled time":
		return w.Throttling.ThrottledTime.Seconds() / w.Duration.Seconds()
	case "Go scheduling latency p99":
		if w.Trace == nil {
			return math.NaN()
		}
		return float64(w.Trace.WaitP99) / 1e6
	case "load p99":
		return m.loadP99
	case "load throughput":
		return m.loadRPS
	case "probe median":
		if w.Probes == nil || len(w.Probes.Latency) == 0 {
			return math.NaN()
		}
		return float64(w.Probes.median()) / 1e6
	}
	return math.NaN()
}

func (m *measured) summary(figs []Figure) string {
	var parts []string
	for _, f := range figs {
		parts = append(parts, fmt.Sprintf("%s %.3g %s", f.Name, m.value(f.Name), f.Unit))
	}
	return strings.Join(parts, ", ")
}

// window starts the command with env added to its environment, lets it
// settle, diagnoses it for d (running the load command meanwhile) and
// stops it (SIGKILL to its process group).
func (cfg ProveConfig) window(env []string, d time.Duration) (*measured, error) {
	cmd := exec.Command(cfg.Cmd[0], cfg.Cmd[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", cfg.Cmd[0], err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	defer func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	}()
	if cfg.started != nil {
		if err := cfg.started(cmd.Process.Pid); err != nil {
			return nil, err
		}
	}
	select {
	case <-exited:
		return nil, fmt.Errorf("%w (%s: %v within %v of its start)", ErrExitedAtOnce, cfg.Cmd[0], cmd.ProcessState, cfg.Settle)
	case <-time.After(cfg.Settle):
	}
	var load *exec.Cmd
	var out bytes.Buffer
	if cfg.Load != "" {
		if cfg.loadProcs != "" {
			// The shell joins the load's cgroup before it runs the load.
			load = exec.Command("sh", "-c", `echo $$ > "$0" && exec sh -c "$1"`, cfg.loadProcs, cfg.Load)
		} else {
			load = exec.Command("sh", "-c", cfg.Load)
		}
		load.Env = append(os.Environ(), "CPUWORK_TARGET_PID="+strconv.Itoa(cmd.Process.Pid))
		load.Stdout, load.Stderr = &out, &out
		if err := load.Start(); err != nil {
			return nil, fmt.Errorf("start --load: %w", err)
		}
	}
	res, err := Run(Config{PID: cmd.Process.Pid, URL: cfg.URL, Duration: d})
	m := &measured{res: res, loadP99: math.NaN()}
	if load != nil {
		load.Wait()
		m.loadP99, m.loadRPS = parseLoadP99(out.String()), parseLoadRPS(out.String())
	}
	if err != nil {
		select {
		case <-exited:
			return nil, fmt.Errorf("%w (%s: %v)", ErrExitedAtOnce, cfg.Cmd[0], cmd.ProcessState)
		default:
		}
		return nil, err
	}
	return m, nil
}

var (
	heyP99     = regexp.MustCompile(`(?m)^\s*99%+ in ([0-9.]+) secs`)
	vegetaText = regexp.MustCompile(`(?m)^Latencies\s+\[[^\]]*\]\s+(.*)$`)
	heyRPS     = regexp.MustCompile(`(?m)^\s*Requests/sec:\s+([0-9.]+)`)
	vegetaRPS  = regexp.MustCompile(`(?m)^Requests\s+\[total, rate, throughput\]\s+[0-9.]+,\s*[0-9.]+,\s*([0-9.]+)`)
)

// parseLoadRPS reads the requests answered per second from a load
// generator's output: hey's "Requests/sec", vegeta's text report's
// throughput (successful requests per second), or a JSON line with
// "rps" or vegeta's "throughput". NaN when none.
func parseLoadRPS(out string) float64 {
	for _, re := range []*regexp.Regexp{heyRPS, vegetaRPS} {
		if m := re.FindStringSubmatch(out); m != nil {
			if v, err := strconv.ParseFloat(m[1], 64); err == nil {
				return v
			}
		}
	}
	return fromJSONLines(out, func(line []byte) (float64, bool) {
		var j struct {
			RPS        *float64 `json:"rps"`
			Throughput *float64 `json:"throughput"`
		}
		switch {
		case json.Unmarshal(line, &j) != nil:
		case j.RPS != nil:
			return *j.RPS, true
		case j.Throughput != nil:
			return *j.Throughput, true
		}
		return 0, false
	})
}

// fromJSONLines returns what get finds in the first line of out it
// finds anything in; NaN when none.
func fromJSONLines(out string, get func(line []byte) (float64, bool)) float64 {
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if v, ok := get(sc.Bytes()); ok {
			return v
		}
	}
	return math.NaN()
}

// parseLoadP99 reads a p99 latency in milliseconds from a load
// generator's output: hey's "99% in X secs", vegeta's text report
// (Latencies [min, mean, 50, 90, 95, 99, max]), vegeta's JSON report
// (latencies.99th in ns), or a JSON line with "p99_ms". NaN when none.
func parseLoadP99(out string) float64 {
	if m := heyP99.FindStringSubmatch(out); m != nil {
		if v, err := strconv.ParseFloat(m[1], 64); err == nil {
			return v * 1000
		}
	}
	if m := vegetaText.FindStringSubmatch(out); m != nil {
		if f := strings.Split(m[1], ","); len(f) >= 6 {
			if d, err := time.ParseDuration(strings.TrimSpace(f[5])); err == nil {
				return float64(d) / 1e6
			}
		}
	}
	return fromJSONLines(out, func(line []byte) (float64, bool) {
		var j struct {
			P99ms     *float64 `json:"p99_ms"`
			Latencies *struct {
				P99 float64 `json:"99th"`
			} `json:"latencies"`
		}
		switch {
		case json.Unmarshal(line, &j) != nil:
		case j.P99ms != nil:
			return *j.P99ms, true
		case j.Latencies != nil:
			return j.Latencies.P99 / 1e6, true
		}
		return 0, false
	})
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return math.NaN()
	}
	return s[len(s)/2]
}

// Text writes the proof for a reader: the diagnosis, the fix and a line
// per figure.
func (p *Proof) Text(out io.Writer) {
	p.Diagnosis.Text(out)
	if p.Fix == nil {
		fmt.Fprintf(out, "\n--prove: %s\n", p.Refusal)
		return
	}
	fmt.Fprintf(out, "\n--prove: the fix applied: %s\n", p.Fix.What)
	fmt.Fprintf(out, "%d rounds, each the command as is, as is again (the A/A control) and fixed, in a shuffled order; %v\n", p.Pairs, p.Elapsed.Round(time.Second))
	if p.LoadWhere != "" {
		fmt.Fprintf(out, "the load ran %s\n", p.LoadWhere)
	}
	for _, felt := range []bool{true, false} {
		head := "what the program's users feel (the verdict rests on these):"
		if !felt {
			head = "the mechanism (not the verdict):"
		}
		printed := false
		for _, f := range p.Figures {
			if f.Felt != felt {
				continue
			}
			if !printed {
				fmt.Fprintln(out, head)
				printed = true
			}
			mark := ""
			if f.finding {
				mark = "  <- the finding's figure"
			}
			if math.IsNaN(f.AsIs) && math.IsNaN(f.Fixed) {
				fmt.Fprintf(out, "  %-26s not measured (the source did not give it): %s\n", f.Name, f.Verdict)
				continue
			}
			fmt.Fprintf(out, "  %-26s as is %.3g, fixed %.3g %s: %.2fx [%.2f-%.2f], A/A %.2fx, margin %.0f%%: %s%s\n",
				f.Name, f.AsIs, f.Fixed, f.Unit, f.Ratio, f.Lo, f.Hi, f.AA, 100*f.Margin, f.Verdict, mark)
		}
	}
	if p.Verdict != "" {
		fmt.Fprintf(out, "verdict: the fix is %s\n", p.Verdict)
	} else if p.NoVerdict != "" {
		fmt.Fprintf(out, "%s\n", p.NoVerdict)
	}
}
