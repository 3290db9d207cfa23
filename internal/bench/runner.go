package bench

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/cpuwork/cpuwork/budget"
	"github.com/cpuwork/cpuwork/cgroup"
	"github.com/cpuwork/cpuwork/internal/workload"
)

// ScenarioInfo describes one scenario for --list.
type ScenarioInfo struct {
	Name     string
	Shows    string
	Variants []string
}

// Scenarios lists the scenarios in the order they run.
func Scenarios() []ScenarioInfo {
	names := func(vs []struct{ name, desc string }) []string {
		var out []string
		for _, v := range vs {
			out = append(out, v.name+": "+v.desc)
		}
		return out
	}
	return []ScenarioInfo{
		{"burst", "~1 ms tasks (fib; the report prints the size measured in the run) arriving at once: bounding concurrency vs a goroutine per task", names(burstVariants)},
		{"burst-long", "40 ms tasks arriving at once: where processor sharing makes every task late", names(burstVariants)},
		{"priority", "critical requests beside batch work that saturates every P, alone and beside a competing CPU-bound process", priorityNames()},
		{"timers", "timer and netpoller latency beside busy CPU workers, alone and beside a competing CPU-bound process", names(timerVariants)},
		{"service", "a net/http service with real CPU work under open-loop load at 50/80/95/110% of capacity", names(serviceVariants)},
		{"quota", "10 goroutines x 2 ms per round in 0.25/1.25/1.5-CPU cgroups: GOMAXPROCS 1..6, Go's default, cpuwork (needs root)", quotaNames()},
		{"neighbour", "a latency probe (1 or 4 ms every 10 ms) beside a CPU hog process: cgroup weights and cpu.idle (needs root)", names(neighbourVariants)},
	}
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
	// Step is called before each measured step (progress display).
	Step func(done, total int, what string)
}

// Runner runs scenarios with one configuration.
type Runner struct {
	cfg          Config
	loadgenGroup *cgroup.Group // the service scenario's load generator cgroup, when root
	rng          *rand.Rand
	slots        int
	rounds       int
	duration     time.Duration
	done         int
	total        int
}

// Run runs the configured scenarios and returns the report.
func Run(cfg Config) (*Report, error) {
	all := Scenarios()
	var known []string
	for _, s := range all {
		known = append(known, s.Name)
	}
	want := cfg.Scenarios
	if len(want) == 0 {
		want = known
	}
	for _, w := range want {
		if !slices.Contains(known, w) {
			return nil, fmt.Errorf("unknown scenario %q (have %s)", w, strings.Join(known, ", "))
		}
	}
	for _, c := range cfg.Compete {
		if !slices.Contains(CompetitionNames(), c) {
			return nil, fmt.Errorf("unknown competition case %q (have %s)", c, strings.Join(CompetitionNames(), ", "))
		}
	}
	if cfg.Repeat < 0 {
		return nil, fmt.Errorf("bench: Repeat %d must be >= 1", cfg.Repeat)
	}
	if cfg.Seed == 0 {
		cfg.Seed = time.Now().UnixNano() % 1e9
	}
	r := &Runner{cfg: cfg, rounds: cfg.Repeat, duration: cfg.Duration, rng: rand.New(rand.NewPCG(uint64(cfg.Seed), 1))}
	if r.rounds == 0 {
		r.rounds = 3
		if cfg.Quick {
			r.rounds = 1
		}
	}
	if r.duration <= 0 {
		r.duration = 2 * time.Second
		if cfg.Quick {
			r.duration = 600 * time.Millisecond
		}
	}
	b, err := budget.Detect()
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	r.slots = b.Slots()
	rep := &Report{Machine: describeMachine(), Started: time.Now(), Quick: cfg.Quick, Repeat: r.rounds, Seed: cfg.Seed,
		Command: strings.Join(os.Args, " "), SchemaNote: "docs/bench.md#results-json"}

	src, err := workload.NewSource()
	if err != nil {
		return nil, err
	}
	// Real workloads: measured at start, so the report says what an item costs here.
	if cfg.Step != nil {
		cfg.Step(-1, 0, "calibrating the workloads (time per item on one core, a few seconds)")
	}
	// Only the workloads the chosen scenarios use (priority and timers use
	// the calibrated spinner, which needs no data).
	uses := map[string][]string{"burst": {"fib"}, "service": {"regexp", "gzip"}}
	var names []string
	for _, sc := range want {
		for _, n := range uses[sc] {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	slices.Sort(names)
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
		rep.Workloads = append(rep.Workloads, wl)
	}

	r.total = r.countSteps(want)
	for _, name := range want {
		var s *Scenario
		switch name {
		case "burst":
			n := 1000
			if cfg.Quick {
				n = 200
			}
			fib := workload.NewFib(1500 * time.Microsecond)
			c, _ := workload.Calibrate(fib, 5)
			s = r.burst("burst", n, c, fib)
		case "burst-long":
			n := 100
			if cfg.Quick {
				n = 20
			}
			spin := workload.NewSpin(40 * time.Millisecond)
			s = r.burst("burst-long", n, spin.D, spin)
		case "priority":
			s = r.priority(200*time.Microsecond, time.Millisecond)
		case "timers":
			s, err = r.timers(time.Millisecond)
			if err != nil {
				s = &Scenario{Name: "timers", Skipped: err.Error()}
			}
		case "quota":
			if len(cfg.LoadGen) == 0 {
				s = &Scenario{Name: "quota", Skipped: "no cpuwork binary to run children with"}
				break
			}
			s = r.quota(cfg.LoadGen[0])
		case "neighbour":
			if len(cfg.LoadGen) == 0 {
				s = &Scenario{Name: "neighbour", Skipped: "no cpuwork binary to run children with"}
				break
			}
			s = r.neighbour(cfg.LoadGen[0])
		case "service":
			if len(cfg.LoadGen) == 0 {
				s = &Scenario{Name: "service", Skipped: "no load generator command configured"}
				break
			}
			s, err = r.service(cfg.LoadGen)
			if err != nil {
				s = &Scenario{Name: "service", Skipped: err.Error()}
			}
		}
		rep.Scenarios = append(rep.Scenarios, s)
	}
	rep.DurationS = time.Since(rep.Started).Seconds()
	return rep, nil
}

func (r *Runner) countSteps(want []string) int {
	n := 0
	for _, w := range want {
		for _, s := range Scenarios() {
			if s.Name == w {
				n += len(s.Variants) * r.rounds
				if w == "service" {
					n += 4*len(s.Variants)*r.rounds + 1 // five load levels per variant, and the capacity measurement
				}
				if w == "neighbour" {
					n += len(s.Variants) * r.rounds // two probes
				}
				if w == "quota" && !r.cfg.Quick {
					n += 2 * len(s.Variants) * r.rounds // three quotas
				}
				if w == "priority" || w == "timers" {
					n = n - len(s.Variants)*r.rounds
					for _, cc := range r.competitions() {
						if w == "priority" {
							n++ // batch alone
						}
						for _, v := range s.Variants {
							if cc.Name == "" || !strings.Contains(v, "(alone only)") {
								n += r.rounds
							}
						}
					}
				}
			}
		}
	}
	return n
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

// shuffled returns vs in a random order (seeded by Config.Seed): each
// repeat runs the variants in another order, so drift hits all of them.
func (r *Runner) shuffled(vs []*Variant) []*Variant {
	out := slices.Clone(vs)
	if r.rng == nil {
		return out
	}
	r.rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// shuffledNames is shuffled for a scenario's variant table.
func (r *Runner) shuffledNames(vs []struct{ name, desc string }) []struct{ name, desc string } {
	out := slices.Clone(vs)
	if r.rng != nil {
		r.rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	}
	return out
}

func (r *Runner) step(what string) {
	if r.cfg.Step != nil {
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
