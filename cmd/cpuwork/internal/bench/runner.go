package bench

import (
	"fmt"
	"github.com/cpuwork/cpuwork/cmd/cpuwork/internal/judge"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/cpuwork/cpuwork/budget"
	"github.com/cpuwork/cpuwork/cgroup"
	"github.com/cpuwork/cpuwork/cmd/cpuwork/internal/workload"
)

// ScenarioInfo describes one scenario for --list.
type ScenarioInfo struct {
	Name     string
	Shows    string
	Variants []string
}

// scenarioDef is one row of the scenario table: everything the runner
// knows of a scenario is here, once.
type scenarioDef struct {
	name, desc string
	variants   func() []string // "name: description" per variant
	uses       []string        // workloads calibrated before the run
	// steps is the number of measured steps, for the progress display,
	// given the number of variants.
	steps func(r *Runner, variants []string) int
	run   func(r *Runner) (*Scenario, error)
	// extra scenarios run only when named (--scenario), never by default.
	extra bool
	// minDuration is the shortest Config.Duration that measures anything
	// (enough requests, canary marks or probes per variant); 0: any.
	minDuration time.Duration
	// budget is the scenario's share of the default run's wall time: past
	// its minimum pairs, a scenario takes another round only while the
	// next look fits in it (not with --thorough or --repeat).
	budget time.Duration
	// maxPairs is the default run's cap of pairs for the scenario (0:
	// defaultMaxPairs): a scenario whose pairs take seconds and whose
	// spread needs more of them gets more.
	maxPairs int
}

// needsBinary runs a scenario that starts children from the cpuwork binary.
func needsBinary(name string, run func(r *Runner, bin []string) (*Scenario, error)) func(r *Runner) (*Scenario, error) {
	return func(r *Runner) (*Scenario, error) {
		if len(r.cfg.LoadGen) == 0 {
			return &Scenario{Name: name, Skipped: "no cpuwork binary to run children with"}, nil
		}
		return run(r, r.cfg.LoadGen)
	}
}

func perVariant(r *Runner, vs []string) int { return len(vs) * r.rounds }

// competed counts the priority and timers steps: every variant in every
// competition case it takes part in, plus, for priority, batch alone.
func competed(batchAlone bool) func(r *Runner, vs []string) int {
	return func(r *Runner, vs []string) int {
		n := 0
		for _, cc := range r.competitions() {
			if batchAlone {
				n += r.rounds // batch alone, once per case and round
			}
			for _, v := range vs {
				if cc.Name == "" || !strings.Contains(v, "(alone only)") {
					n += r.rounds
				}
			}
		}
		return n
	}
}

var scenarioTable = []scenarioDef{
	{name: "burst", desc: "~1 ms tasks (fib; the report prints the size measured in the run) arriving at once: bounding concurrency vs a goroutine per task",
		variants: func() []string { return describe(burstVariants) }, uses: []string{"fib"}, steps: perVariant,
		run: func(r *Runner) (*Scenario, error) {
			n := 500
			if r.cfg.Quick {
				n = 200
			}
			fib := workload.NewFib(1500 * time.Microsecond)
			c, _ := workload.Calibrate(fib, 5)
			return r.burst("burst", n, c, fib), nil
		}, budget: 30 * time.Second, maxPairs: burstMaxPairs},
	{name: "burst-long", desc: "40 ms tasks arriving at once: where processor sharing makes every task late",
		variants: func() []string { return describe(burstVariants) }, steps: perVariant,
		run: func(r *Runner) (*Scenario, error) {
			n := 50
			if r.cfg.Quick {
				n = 20
			}
			spin := workload.NewSpin(40 * time.Millisecond)
			return r.burst("burst-long", n, spin.D, spin), nil
		}, budget: 20 * time.Second},
	{name: "priority", desc: "critical requests over loopback HTTP from a generator process, beside batch work that saturates every P, alone and beside a competing CPU-bound process",
		variants: priorityNames, steps: competed(true),
		run: func(r *Runner) (*Scenario, error) {
			if len(r.cfg.LoadGen) == 0 {
				return &Scenario{Name: "priority", Skipped: "no load generator command configured"}, nil
			}
			return r.priority("priority", 200*time.Microsecond, time.Millisecond, true), nil
		},
		minDuration: 500 * time.Millisecond, // the generator's pacing and start-up
		budget:      90 * time.Second},
	{name: "priority-inprocess", extra: true, desc: "the priority scenario with requests dispatched in process by a goroutine sleeping to each arrival (measures timer lateness under busy Ps; not in the default set)",
		variants: priorityNames, steps: competed(true),
		run: func(r *Runner) (*Scenario, error) {
			return r.priority("priority-inprocess", 200*time.Microsecond, time.Millisecond, false), nil
		},
		minDuration: 100 * time.Millisecond}, // >= 14 requests at one per 7 ms
	{name: "timers", desc: "timer and netpoller latency beside busy CPU workers, alone and beside a competing CPU-bound process",
		variants: func() []string { return describe(timerVariants) }, steps: competed(false),
		run:         func(r *Runner) (*Scenario, error) { return r.timers(time.Millisecond) },
		minDuration: 100 * time.Millisecond, // >= 100 canary marks
		budget:      40 * time.Second},
	{name: "service", desc: "a net/http service with real CPU work under open-loop load at 80% and 200% of capacity (50/80/95/200/400% with --thorough), each variant's capacity at the latency objective by a stepped search, and 80% again beside a competing CPU-bound process",
		variants: func() []string { return append(describe(serviceVariants), "pool-503"+aaSuffix+": "+aaDesc("pool-503")) }, uses: []string{"regexp", "gzip"},
		steps: func(r *Runner, vs []string) int { return loadSteps(r, vs, r.loadLevels(serviceLoads)) },
		run: func(r *Runner) (*Scenario, error) {
			if len(r.cfg.LoadGen) == 0 {
				return &Scenario{Name: "service", Skipped: "no load generator command configured"}, nil
			}
			return r.service(r.cfg.LoadGen)
		},
		minDuration: 500 * time.Millisecond, // the generator's pacing and start-up
		budget:      170 * time.Second},
	{name: "inference", desc: "an ONNX Runtime (cgo) inference service under open-loop load at 80% and 200% of capacity (50/80/95/200/400% with --thorough), each variant's capacity at the latency objective by a stepped search, 80% again beside a competing CPU-bound process, and 200% in a 1.5-CPU cgroup: goroutine per request, the field report's worker pool, in overload a bounded pool answering 503 and a semaphore whose waiters leave at the objective, cpuwork (optional install: " + workload.ONNXInstall + ")",
		variants: func() []string {
			return append(append(describe(inferenceVariants), describe(inferenceQuotaExtras)...), "pool"+aaSuffix+": "+aaDesc("pool"))
		},
		steps: func(r *Runner, vs []string) int {
			return loadSteps(r, vs[:len(vs)-len(inferenceQuotaExtras)-1], r.loadLevels(inferenceLoads)) + r.rounds
		},
		run: func(r *Runner) (*Scenario, error) {
			if len(r.cfg.LoadGen) == 0 {
				return &Scenario{Name: "inference", Skipped: "no load generator command configured"}, nil
			}
			return r.inference(r.cfg.LoadGen)
		},
		minDuration: 500 * time.Millisecond,
		budget:      240 * time.Second},
	realserverDef(imageproxyTarget),
	realserverDef(opaTarget),
	realserverDef(vipsTarget),
	realserverDef(vipsFloorTarget),
	realserverDef(zstdTarget),
	realserverDef(zstdFloorTarget),
	tenantsDef(imageproxyTarget),
	tenantsDef(opaTarget),
	mixedDef(imageproxyTarget),
	mixedDef(opaTarget),
	realserverStepDef(imageproxyTarget),
	fleetDef(),
	{name: "quota", desc: "10 goroutines x 2 ms per round in 0.25/1.25/1.5-CPU cgroups: GOMAXPROCS 1..6, Go's default, cpuwork (needs root)",
		variants: quotaNames,
		steps: func(r *Runner, vs []string) int {
			if r.cfg.Quick {
				return len(vs) * r.rounds
			}
			return 3 * len(vs) * r.rounds // three quotas
		},
		run:    needsBinary("quota", func(r *Runner, bin []string) (*Scenario, error) { return r.quota(bin[0]), nil }),
		budget: 55 * time.Second},
	{name: "neighbour", desc: "a latency probe (1 or 4 ms every 10 ms) beside a CPU hog process: cgroup weights and cpu.idle (needs root)",
		variants:    func() []string { return describe(neighbourVariants) },
		steps:       func(r *Runner, vs []string) int { return 2 * len(vs) * r.rounds }, // two probes
		run:         needsBinary("neighbour", func(r *Runner, bin []string) (*Scenario, error) { return r.neighbour(bin[0]), nil }),
		minDuration: 500 * time.Millisecond, // >= 50 probes
		budget:      35 * time.Second},
}

// loadSteps estimates a load scenario's steps: every variant run (vs
// ends with the A/A control) at every level, and the capacity before each
// round, alone and again beside the competitor.
func loadSteps(r *Runner, vs []string, def []float64) int {
	n := 0
	for _, v := range vs {
		if r.runs(strings.SplitN(v, ":", 2)[0]) {
			n++
		}
	}
	loads := r.loadLevels(def)
	steps := (n*len(loads) + capacitySteps) * r.rounds
	if slices.Contains(loads, searchSteps[0]) {
		steps += searchStepsPerRound * n * r.rounds
	}
	if _, ok := r.besideCase(loads); ok {
		steps += (n + capacitySteps) * r.rounds
	}
	return steps
}

// describe lists a variant table as "name: description".
func describe(vs []struct{ name, desc string }) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.name+": "+v.desc)
	}
	return out
}

// names lists a variant table's names.
func names(vs []struct{ name, desc string }) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.name)
	}
	return out
}

// Scenarios lists the scenarios in the order they run.
func Scenarios() []ScenarioInfo {
	var out []ScenarioInfo
	for _, d := range scenarioTable {
		out = append(out, ScenarioInfo{d.name, d.desc, d.variants()})
	}
	return out
}

// Config selects and sizes the run.
type Config struct {
	Scenarios []string      // empty: all
	Duration  time.Duration // per variant per repeat for the time-based scenarios; 0: 2 s (quick: 0.6 s)
	Quick     bool          // whole suite in about a minute, for smoke tests
	// Repeat is how often every variant runs (0: 3, or 1 with Quick). The
	// variants of a scenario run in a shuffled order in each repeat.
	Repeat int
	// Seed seeds the shuffles (0: from the clock); the report prints it.
	Seed int64
	// Compete lists the competition cases of the priority and timers
	// scenarios by name (CompetitionNames); empty: all (alone and nice0
	// with Quick).
	Compete []string
	// LoadGen is the command line that starts the load generator process
	// for the service scenario (the cpuwork binary's hidden "loadgen"
	// subcommand); LoadGen[0], the cpuwork binary, also runs the quota
	// scenario's children. nil skips both scenarios.
	LoadGen []string
	// Variants, when not empty, restricts the load scenarios (service,
	// inference) to these variants (names without "@load" or "+quota");
	// their calibration runs still run. Verdicts that need a variant left
	// out say "not judged".
	Variants []string
	// Loads, when not empty, replaces the load levels of the load
	// scenarios (fractions of the measured capacity, e.g. 0.8).
	Loads []float64
	// Thorough runs every variant (the extras too) and raises the cap of
	// pairs from 12 to 24 with no time share: a publication run.
	Thorough bool
	// Step is called before each measured step (progress display).
	Step func(done, total int, what string)
	// Done is called with each scenario as soon as it is judged
	// (streaming its table and verdict).
	Done func(s *Scenario)
}

// thoroughOnly names the variants that run only with --thorough: never
// the best alternative in the checked-in runs, not the judged variant,
// not a claim's baseline or floor (docs/bench.md lists why each).
var thoroughOnly = map[string]bool{
	"cpuwork-do":           true, // burst: Do per goroutine, the For alternative a user need not pick
	"two-pools":            true, // priority: 1.8x goroutines-yield's p99 or worse
	"os-thread-pool":       true,
	"hybrid":               true,
	"cpuwork-demote":       true, // priority: cpuwork options, not alternatives
	"cpuwork-nocheckpoint": true,
	"cpuwork-sparep":       true,
	"P=3":                  true, // quota: GOMAXPROCS values never the best
	"P=4":                  true,
	"P=6":                  true,
	"cpuwork-floor":        true, // quota: cpuwork policies, not alternatives
	"same-cgroup":          true, // neighbour: references, not the claim's comparison
	"hog-idle":             true,
}

// defaultRun reports whether this is the default run: not --quick,
// --thorough or --repeat. It asks the declared questions
// (questions.txt) within its time shares and says of each it cannot
// decide in them how many pairs would.
func (r *Runner) defaultRun() bool {
	return r.cfg.Repeat == 0 && !r.cfg.Quick && !r.cfg.Thorough
}

// namedOnly names the variants that run only when named
// (Config.Variants): they measure what a feature costs or record a
// trace, not an alternative.
var namedOnly = map[string]bool{
	"cpuwork-observe":        true,
	"cpuwork-observe-locked": true,
}

// runs reports whether the run runs a variant: a namedOnly one when
// named (Config.Variants); the others with --thorough or when named,
// else those not thoroughOnly.
func (r *Runner) runs(variant string) bool {
	base, _ := baseName(variant)
	base, _, _ = strings.Cut(base, "@")
	named := slices.Contains(r.cfg.Variants, base)
	if namedOnly[base] {
		return named
	}
	return r.cfg.Thorough || !thoroughOnly[base] || named
}

// wants reports whether the load scenarios run variant (Config.Variants).
func (r *Runner) wants(variant string) bool {
	base, _ := baseName(variant) // a case's variant (naive+nice0) is wanted with its base
	return len(r.cfg.Variants) == 0 || slices.Contains(r.cfg.Variants, variant) || slices.Contains(r.cfg.Variants, base)
}

// loadLevels is Config.Loads, or thoroughLoads with --thorough, or def.
func (r *Runner) loadLevels(def []float64) []float64 {
	if len(r.cfg.Loads) == 0 && r.cfg.Thorough {
		return slices.Clone(thoroughLoads)
	}
	return r.loadsOr(def)
}

// loadsOr is Config.Loads, or def when it is empty.
func (r *Runner) loadsOr(def []float64) []float64 {
	if len(r.cfg.Loads) > 0 {
		return slices.Clone(r.cfg.Loads)
	}
	return def
}

// Runner runs scenarios with one configuration.
type Runner struct {
	cfg          Config
	loadgenGroup *cgroup.Group // the service scenario's load generator cgroup, when root
	rng          *rand.Rand
	slots        int
	rounds       int // the minimum pairs of every scenario (the progress display's estimate)
	maxRounds    int // the cap of pairs
	budget       time.Duration
	perRound     int           // the running scenario's steps per round
	shareLeft    time.Duration // the time shares of the scenarios not started yet
	started      time.Time     // the running scenario's start
	shareOf      time.Duration // the running scenario's time share
	work         loadWork
	// died is what the real-server run that just ended says of a server
	// that died in it ("": none; realOnce, realVariantOnce).
	died string
	// afterShare is the time the running scenario will spend after its
	// paired rounds, per round, as a share of a round (a load scenario's
	// levels beside a competitor): the time share counts it too.
	afterShare float64
	duration   time.Duration
	loadDur    time.Duration // per run of the load scenarios (service, inference)
	// stepLoad, when its At is set, makes each load run a step from
	// stepLoad.From to the run's rate (the step response); clientTimeout,
	// when set, is how long the generator's clients wait before they give
	// up (else 30 s).
	stepLoad      StepLoad
	clientTimeout time.Duration
	// mixSeed seeds the generator's request mix in the running round
	// (mixSeedOf).
	mixSeed uint64
	// tenants, when its n is positive, sends each request for one of n
	// tenants, t0 flooding (LoadSpec.Tenants): the tenants scenarios.
	tenants struct {
		n     int
		flood float64
	}
	// onlySmall sends every request of the load runs to /small (the
	// mixed-urgency scenarios' interactive traffic); onServer, when set,
	// is told a real server's address once it listens (their batch
	// clients start then).
	onlySmall bool
	onServer  func(addr string)
	// search makes atLoads run the capacity search (search.go) after each
	// round's levels, when they include its first step (80 %).
	search bool
	done   int
	total  int
}

// ConfigError is a Config the bench refuses before running anything (a
// usage error of the CLI): its message names the flag.
type ConfigError struct{ msg string }

func (e *ConfigError) Error() string { return e.msg }

func configErr(format string, a ...any) error { return &ConfigError{fmt.Sprintf(format, a...)} }

// Validate checks cfg as Run would, before anything runs: it returns a
// *ConfigError naming the flag at fault.
func Validate(cfg Config) error {
	_, err := wanted(cfg)
	return err
}

// wanted validates cfg and returns the scenarios it runs.
func wanted(cfg Config) ([]string, error) {
	var known []string
	for _, d := range scenarioTable {
		known = append(known, d.name)
	}
	want := cfg.Scenarios
	if len(want) == 0 {
		for _, d := range scenarioTable {
			if !d.extra {
				want = append(want, d.name)
			}
		}
	}
	for _, w := range want {
		if !slices.Contains(known, w) {
			return nil, configErr("bench: --scenario %q: unknown (have %s)", w, strings.Join(known, ", "))
		}
	}
	if len(cfg.Variants) > 0 {
		var names []string
		for _, d := range scenarioTable {
			if d.variants == nil {
				continue
			}
			for _, v := range d.variants() {
				if n, _, _ := strings.Cut(v, ":"); !slices.Contains(names, n) {
					names = append(names, n)
				}
			}
		}
		for _, v := range cfg.Variants {
			if base, _ := baseName(v); !slices.Contains(names, v) && !slices.Contains(names, base) {
				return nil, configErr("bench: --variants %q: unknown (have %s; see --list)", v, strings.Join(names, ", "))
			}
		}
	}
	for _, c := range cfg.Compete {
		if !slices.Contains(CompetitionNames(), c) {
			return nil, configErr("bench: --compete %q: unknown (have %s)", c, strings.Join(CompetitionNames(), ", "))
		}
	}
	for _, l := range cfg.Loads {
		if !(l > 0 && l <= 10) {
			return nil, configErr("bench: --loads %v%%: must be a percentage of capacity in (0, 1000]", l*100)
		}
	}
	if cfg.Repeat < 0 {
		return nil, configErr("bench: --repeat %d: must be >= 1 (or 0 for as many pairs as needed)", cfg.Repeat)
	}
	if cfg.Quick && cfg.Thorough {
		return nil, configErr("bench: --quick and --thorough exclude each other")
	}
	for _, d := range scenarioTable {
		if cfg.Duration > 0 && cfg.Duration < d.minDuration && slices.Contains(want, d.name) {
			return nil, configErr("bench: --duration %v is below the %s scenario's minimum of %v", cfg.Duration, d.name, d.minDuration)
		}
	}
	return want, nil
}

// Run runs the configured scenarios and returns the report. A Config it
// refuses is a *ConfigError.
func Run(cfg Config) (*Report, error) {
	want, err := wanted(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.Seed == 0 {
		cfg.Seed = time.Now().UnixNano() % 1e9
	}
	r := newRunner(cfg)
	b, err := budget.Detect()
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	r.slots = b.Slots()
	rep := &Report{Machine: describeMachine(), Started: time.Now(), Quick: cfg.Quick, Repeat: r.rounds, Seed: cfg.Seed,
		Command: strings.Join(os.Args, " "), SchemaNote: "docs/bench.md#results-json", PairsRule: r.pairsRule()}

	// Cgroups that a bench killed before it could clean up left behind.
	for _, dir := range SweepStale() {
		rep.Swept = append(rep.Swept, dir)
		if cfg.Step != nil {
			cfg.Step(-1, 0, "removed a cgroup left by a bench that died: "+dir)
		}
	}

	src, err := workload.NewSource()
	if err != nil {
		return nil, err
	}
	// Real workloads: measured at start, so the report says what an item costs here.
	if cfg.Step != nil {
		cfg.Step(-1, 0, "calibrating the workloads (time per item on one core, a few seconds)")
	}
	rep.Workloads = calibrate(r.chosen(want), src)
	r.runScenarios(rep, r.chosen(want))
	if cfg.Step != nil && r.total > 0 {
		cfg.Step(r.total-1, r.total, "done")
	}
	rep.DurationS = time.Since(rep.Started).Seconds()
	if !cfg.Quick {
		rep.Answers = answer(rep)
	}
	return rep, nil
}

// newRunner is the runner of cfg: its pairs and run lengths by mode
// (--repeat, --quick, --thorough, the default run).
func newRunner(cfg Config) *Runner {
	r := &Runner{cfg: cfg, rounds: cfg.Repeat, duration: cfg.Duration, rng: rand.New(rand.NewPCG(uint64(cfg.Seed), 1))}
	r.maxRounds = r.rounds
	switch {
	case r.rounds > 0: // --repeat: exactly that many pairs
	case cfg.Quick:
		r.rounds, r.maxRounds = 1, 1
	case cfg.Thorough:
		r.rounds, r.maxRounds = minPairs, thoroughMaxPairs
	default:
		r.rounds, r.maxRounds = minPairs, defaultMaxPairs
	}
	if r.duration <= 0 {
		r.duration = defaultDuration
		switch {
		case cfg.Quick:
			r.duration = quickDuration
		case cfg.Thorough:
			r.duration = thoroughDuration
		}
	}
	// The load scenarios' runs: 2 s by default (a p99 of 200-1000
	// requests, so more pairs decide instead of longer runs), 5 s with
	// --thorough.
	r.loadDur = cfg.Duration
	if r.loadDur <= 0 {
		r.loadDur = defaultLoadDuration
		switch {
		case cfg.Quick:
			r.loadDur = quickDuration
		case cfg.Thorough:
			r.loadDur = thoroughLoadDuration
		}
	}
	return r
}

// calibrate measures the time per item on one core of the workloads ds
// use (priority and timers use the calibrated spinner, which needs no
// data), so that the report says what an item costs here.
func calibrate(ds []scenarioDef, src *workload.Source) []Workload {
	var names []string
	for _, d := range ds {
		for _, n := range d.uses {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	slices.Sort(names)
	var out []Workload
	for _, name := range names {
		w, err := workload.New(name, src)
		wl := Workload{Name: name}
		if err == nil {
			var d time.Duration
			d, err = workload.Calibrate(w, 5)
			wl.PerItemS = d.Seconds()
		}
		if err != nil {
			wl.Error = err.Error()
		}
		out = append(out, wl)
	}
	return out
}

// runScenarios runs ds in turn into rep, each within its share of the
// run's time in a default run, reporting each as it is judged.
func (r *Runner) runScenarios(rep *Report, ds []scenarioDef) {
	cfg := r.cfg
	r.total = 0
	for _, d := range ds {
		r.total += d.steps(r, d.variants())
	}
	for _, d := range ds {
		r.shareLeft += d.budget
	}
	maxRounds := r.maxRounds
	for _, d := range ds {
		end := r.done + d.steps(r, d.variants())
		r.shareLeft -= d.budget
		r.shareOf, r.started = d.budget, time.Now()
		r.budget, r.maxRounds = 0, maxRounds
		if r.defaultRun() {
			r.budget = d.budget
			if d.maxPairs > 0 {
				r.maxRounds = d.maxPairs
			}
		}
		r.perRound = d.steps(r, d.variants()) / max(r.rounds, 1)
		t0 := time.Now()
		s, err := d.run(r)
		if err != nil {
			s = &Scenario{Name: d.name, Skipped: err.Error()}
		}
		if s.Skipped != "" {
			s.Status = StatusSkipped
		}
		s.DurationS = time.Since(t0).Seconds()
		rep.Scenarios = append(rep.Scenarios, s)
		if cfg.Done != nil {
			cfg.Done(s)
		}
		// A skipped (or shortened) scenario still moves the progress
		// display to where it would have ended.
		r.done = max(r.done, end)
	}
}

// loadWork is what a load scenario's requests weigh: each kind's CPU cost
// (seconds on one core, as calibrated) and the latency objective a request
// must meet to count as goodput.
type loadWork struct {
	cost map[string]float64
	slo  time.Duration
}

// pairsRule describes the run's stopping rule in words.
func (r *Runner) pairsRule() string {
	switch {
	case r.cfg.Quick:
		return "smoke test: one pair, no verdicts"
	case r.rounds == r.maxRounds:
		return fmt.Sprintf("%d pairs per scenario (--repeat), judged once; %s", r.rounds, r.levelWords())
	case r.cfg.Thorough:
		return fmt.Sprintf("%d to %d pairs per scenario (--thorough): judged after %v pairs, stopping when every comparison is decided; %s", r.rounds, r.maxRounds, looks, r.levelWords())
	}
	return fmt.Sprintf("%d to %d pairs per scenario within its share of the run's time: judged after %v pairs, stopping when every comparison is decided; %s", r.rounds, r.maxRounds, looksTo(r.maxRounds), r.levelWords())
}

// The time per variant per pair when --duration is 0: the time-based
// scenarios' and the load scenarios' (service, inference), by default,
// with --thorough and with --quick.
const (
	defaultDuration      = time.Second
	thoroughDuration     = 2 * time.Second
	defaultLoadDuration  = 2 * time.Second
	thoroughLoadDuration = 5 * time.Second
	quickDuration        = 600 * time.Millisecond
)

// DurationDefaults says in words what --duration 0 means.
func DurationDefaults() string {
	return fmt.Sprintf("0 = %v (%v for service and inference); with --thorough %v (%v); with --quick %v",
		defaultDuration, defaultLoadDuration, thoroughDuration, thoroughLoadDuration, quickDuration)
}

// PairsDefaults says in words how many pairs a run takes.
func PairsDefaults() (asNeeded, thorough string) {
	return fmt.Sprintf("%d to %d as needed", minPairs, defaultMaxPairs), fmt.Sprintf("up to %d", thoroughMaxPairs)
}

// lookLevel is the level of each look's interval in this run: a run of
// a fixed number of pairs (--repeat) looks once, at the end, at 95 %;
// otherwise Pocock's per-look level for the looks up to its cap.
func (r *Runner) lookLevel() float64 {
	if r.rounds == r.maxRounds {
		return judge.Confidence
	}
	return lookLevel(r.maxRounds)
}

// levelWords says at which level the run's intervals are computed.
func (r *Runner) levelWords() string {
	if r.rounds == r.maxRounds {
		return "each interval at 95 %, looked at once"
	}
	k := len(looksTo(r.maxRounds))
	return fmt.Sprintf("each look's interval at %.1f %% (95 %% over the %d looks together: Pocock; a scenario with a higher cap of pairs, the burst's, looks more often at a higher level: each line prints its own)", 100*r.lookLevel(), k)
}

// looksTo lists the looks up to max.
func looksTo(max int) []int {
	var out []int
	for _, l := range looks {
		if l <= max {
			out = append(out, l)
		}
	}
	return out
}

// pairs runs round(i) for i = 0, 1, ...: the paired rounds of scenario
// s, in each of which every variant runs once, alternated. It runs
// r.rounds rounds (minPairs; 1 with --quick; --repeat's count), then
// judges s at each look (compare.go) and runs on to the next look only
// while a comparison is inconclusive, the cap of pairs allows, and the
// scenario's time budget has room for the rounds to the next look at the
// pace of the rounds so far. A comparison decided at a look keeps the
// pairs it was decided on (Scenario.decidedAt).
func (r *Runner) pairs(s *Scenario, checks func() []check, round func(i int)) {
	s.smoke = r.cfg.Quick
	s.defaultRun = r.defaultRun()
	s.decidedAt = map[string]int{}
	s.level = r.lookLevel()
	start := time.Now()
	for i := 0; ; i++ {
		if i >= r.rounds && !r.more(s, i, checks, time.Since(start)) {
			return
		}
		round(i)
		s.Pairs = i + 1
		if s.Skipped != "" {
			return
		}
	}
}

// more decides whether s, after done rounds taking took, runs another.
func (r *Runner) more(s *Scenario, done int, checks func() []check, took time.Duration) bool {
	if done >= r.maxRounds || r.cfg.Quick {
		return false
	}
	if !isLook(done) {
		return true // on to the next look
	}
	judgeChecks(s, checks())
	for _, c := range s.Checks {
		if c.Kind == "comparison" && c.NotJudged == "" && c.Verdict != Inconclusive {
			if _, ok := s.decidedAt[c.Label]; !ok {
				s.decidedAt[c.Label] = c.Pairs
			}
		}
	}
	if s.undecided() == 0 {
		return false
	}
	next := r.maxRounds
	for _, l := range looks {
		if l > done {
			next = min(l, r.maxRounds)
			break
		}
	}
	total := func(rounds int) time.Duration { // the scenario's time after rounds rounds at this pace
		return time.Duration(float64(took) / float64(done) * float64(rounds) * (1 + r.afterShare))
	}
	if r.budget > 0 && total(next) > r.budget {
		s.Notes = append(s.Notes, fmt.Sprintf("stopped at %d pairs: %d more to the next look would pass the scenario's %v share of the default run (--thorough runs up to %d)", done, next-done, r.budget, thoroughMaxPairs))
		return false
	}
	if r.cfg.Step != nil {
		r.cfg.Step(-1, 0, fmt.Sprintf("%s: %d comparison(s) inconclusive after %d pairs: running pairs %d-%d", s.Name, s.undecided(), done, done+1, next))
	}
	r.total += (next - done) * r.perRound
	return true
}

// chosen returns the table rows named in want, in want's order.
func (r *Runner) chosen(want []string) []scenarioDef {
	var out []scenarioDef
	for _, w := range want {
		for _, d := range scenarioTable {
			if d.name == w {
				out = append(out, d)
			}
		}
	}
	return out
}

// warmUp runs each variant once for a short, discarded run (executors,
// pools, locked threads and caches start before anything is measured).
// Skipped with Quick.
func (r *Runner) warmUp(what string, vs []*Variant, run func(v *Variant)) {
	if r.cfg.Quick {
		return
	}
	if r.cfg.Step != nil {
		r.cfg.Step(-1, 0, what+": warming up every variant (short runs, discarded)")
	}
	d := r.duration
	r.duration = min(d, 200*time.Millisecond)
	defer func() { r.duration = d }()
	for _, v := range vs {
		run(v)
	}
}

// shuffledOf returns xs in a random order (seeded by Config.Seed): each
// repeat runs the variants, competition cases, load and quota levels in
// another order, so drift hits all of them.
func shuffledOf[T any](r *Runner, xs []T) []T {
	out := slices.Clone(xs)
	if r.rng != nil {
		r.rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	}
	return out
}

// shuffled is shuffledOf for variants.
func (r *Runner) shuffled(vs []*Variant) []*Variant { return shuffledOf(r, vs) }

func (r *Runner) step(what string) {
	// A scenario can take more steps than it counted (the capacity
	// descent stops wherever the rate is kept up with): the total grows
	// rather than show [117/116].
	r.total = max(r.total, r.done+2)
	if r.cfg.Step != nil {
		if r.budget > 0 { // the default run: its scenarios' time shares say what is left
			left := r.shareLeft + max(0, r.shareOf-time.Since(r.started))
			what += fmt.Sprintf(" (about %s left)", left.Round(10*time.Second))
		}
		r.cfg.Step(r.done, r.total, what)
	}
	r.done++
}

func priorityNames() []string {
	var out []string
	for _, v := range priorityVariants {
		d := v.name + ": " + v.desc
		if !v.compete {
			d += " (alone only)"
		}
		out = append(out, d)
	}
	return out
}

func quotaNames() []string {
	var out []string
	for _, v := range quotaVariants() {
		out = append(out, v.name+": "+v.desc)
	}
	return out
}
