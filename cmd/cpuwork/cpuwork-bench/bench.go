package main

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/cpuwork/cpuwork/cmd/cpuwork/internal/bench"
	"github.com/cpuwork/cpuwork/cmd/cpuwork/internal/cli"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

func benchCmd() *cobra.Command {
	var o benchFlags
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure cpuwork against the best alternative on real work: better, equivalent or worse",
		Long: `Run cpuwork's benchmark scenarios on this machine and report, per scenario
and case, whether cpuwork is better, equivalent or worse than the best
alternative a user would write instead, and how sure that is.

Latency is measured from each task's arrival (its intended send time under
open-loop load, or the burst's start) to its completion, in HDR histograms.
The variants of a scenario run alternated, in a shuffled order per repeat
(burst, burst-long, priority and timers in this one process; quota,
neighbour and service with child processes), and are reported as ratios
against the scenario's baseline; p99 is the median of the repeats with
their range. A variant whose
achieved rate is below 99% of the offered rate is marked invalid.

Each comparison is judged on the per-pair ratios of paired, alternated
rounds: an estimate with its 95 % confidence interval, against the
equivalence margin an A/A control (one alternative run twice in every round)
measured in the same run. A scenario runs 3 pairs, then more, up to 12,
while a comparison is inconclusive and its share of the run's time allows:
the default suite takes about 9 minutes on 2 cores. --thorough runs every
variant, longer runs and up to 24 pairs (a publication run); --quick is a
smoke test of a minute or two that prints no verdicts. An inconclusive
comparison says about how many pairs would decide it here, and the
command that runs them.
The report directory gets index.html (plots, opens offline), results.json
and the HDR histograms. Schema and scenario details: docs/bench.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.list {
				return listScenarios(cmd.OutOrStdout())
			}
			cfg, err := o.config()
			if err != nil {
				return err
			}
			return o.run(cmd.OutOrStdout(), cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.scenarios, "scenario", "", "comma-separated scenarios to run (default all; see --list)")
	f.DurationVar(&o.duration, "duration", 0, "time per variant per pair for the time-based scenarios (priority, timers, service, inference); "+bench.DurationDefaults()+"; negative is refused")
	f.BoolVar(&o.quick, "quick", false, "smoke test: smaller bursts, one pair, short runs, the whole suite in a minute or two; prints no verdicts")
	f.BoolVar(&o.noSetup, "no-setup", false, "do not install ONNX Runtime for the inference scenario when it is missing (it is then skipped)")
	asNeeded, upTo := bench.PairsDefaults()
	f.BoolVar(&o.thorough, "thorough", false, "publication run: every variant (the extras too), more load levels, longer runs, "+upTo+" pairs with no time share")
	f.StringVar(&o.out, "out", "./cpuwork-report", "directory for index.html, results.json and histograms/ (\"\" = none)")
	f.BoolVar(&o.asJSON, "json", false, "print results.json to stdout instead of tables (progress still goes to stderr)")
	f.BoolVar(&o.list, "list", false, "list scenarios and variants with what each shows, then exit")
	f.IntVar(&o.repeat, "repeat", 0, "exactly this many pairs per scenario, judged once, instead of "+asNeeded+" (0 = as needed)")
	f.Int64Var(&o.seed, "seed", 0, "seed of the per-repeat shuffles (0 = from the clock; printed in the report)")
	f.StringVar(&o.variants, "variants", "", "comma-separated variants to run in the load scenarios (service, inference), e.g. pool,cpuwork (default all; see --list); verdicts that need a variant left out say not judged")
	f.StringVar(&o.loads, "loads", "", "comma-separated load levels of the load scenarios in percent of the measured capacity, e.g. 80,110 (default: 80,200; 50,80,95,200,400 with --thorough)")
	f.StringVar(&o.compete, "compete", "", "comma-separated competition cases for priority and timers: "+strings.Join(bench.CompetitionNames(), ", ")+
		" (default alone,nice0; alone,nice0,sibling with --thorough): the variants also run beside one CPU-bound process (a shell busy loop the bench starts and kills) in the same cgroup at nice 0 or 19, or in a cgroup of its own (sibling, needs root); with nice0 the service and inference scenarios also run their 80% level beside it, when that level runs")
	return cmd
}

// benchFlags are bench's flags.
type benchFlags struct {
	scenarios string
	duration  time.Duration
	quick     bool
	out       string
	asJSON    bool
	list      bool
	compete   string
	variants  string
	loads     string
	repeat    int
	seed      int64
	thorough  bool
	noSetup   bool
}

// listScenarios prints the scenarios and their variants with what each
// shows.
func listScenarios(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, s := range bench.Scenarios() {
		fmt.Fprintf(tw, "%s\t%s\n", s.Name, s.Shows)
		for _, v := range s.Variants {
			fmt.Fprintf(tw, "\t  %s\n", v)
		}
	}
	return tw.Flush()
}

// config is the run the flags ask for, or a usage error; flags the bench
// refuses are refused before anything runs or is installed.
func (o *benchFlags) config() (bench.Config, error) {
	if o.duration < 0 {
		return bench.Config{}, cli.UsageError(fmt.Errorf("bench: --duration %v: must be positive (or 0 for the default)", o.duration))
	}
	if o.repeat < 0 {
		return bench.Config{}, cli.UsageError(fmt.Errorf("bench: --repeat %d: must be >= 1 (or 0 for as many pairs as needed)", o.repeat))
	}
	cfg := bench.Config{Duration: o.duration, Quick: o.quick, Repeat: o.repeat, Seed: o.seed, Thorough: o.thorough}
	if exe, err := os.Executable(); err == nil {
		cfg.LoadGen = []string{exe, "loadgen"}
	}
	if o.scenarios != "" {
		cfg.Scenarios = strings.Split(o.scenarios, ",")
	}
	if o.compete != "" {
		cfg.Compete = strings.Split(o.compete, ",")
	}
	if o.variants != "" {
		cfg.Variants = strings.Split(o.variants, ",")
	}
	if o.loads != "" {
		for _, l := range strings.Split(o.loads, ",") {
			pct, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(l), "%"), 64)
			if err != nil || !(pct > 0 && pct <= 1000) {
				return bench.Config{}, cli.UsageError(fmt.Errorf("bench: --loads %q: want percentages of capacity in (0, 1000], e.g. 80,110", l))
			}
			cfg.Loads = append(cfg.Loads, pct/100)
		}
	}
	if err := bench.Validate(cfg); err != nil {
		return bench.Config{}, cli.UsageError(err)
	}
	// A report directory that cannot be written is refused before
	// anything runs (a full run takes minutes).
	if o.out != "" {
		if err := checkWritable(o.out); err != nil {
			return bench.Config{}, cli.UsageError(fmt.Errorf("bench: --out %s: %w", o.out, err))
		}
	}
	return cfg, nil
}

// run runs cfg, printing each scenario to stdout as it is judged (or the
// report as JSON at the end), progress to stderr, and writes the report
// directory.
func (o *benchFlags) run(stdout io.Writer, cfg bench.Config) error {
	if !o.noSetup && (o.scenarios == "" || strings.Contains(o.scenarios, "inference")) {
		if err := setupONNX(os.Stderr); err != nil {
			fmt.Fprintf(os.Stderr, "the inference scenario will be skipped: %v\n", err)
		}
	}
	defer cleanupOnSignal()()
	bench.Color = term.IsTerminal(int(os.Stdout.Fd()))
	bar := progress(&cfg)
	// Each scenario's table and verdict as soon as it is judged.
	if !o.asJSON {
		fmt.Fprint(stdout, bench.Legend+"\n")
		if fs := bench.FirstScreen(cfg); fs != "" && len(cfg.Scenarios) == 0 {
			fmt.Fprint(stdout, fs+"\n")
		}
		cfg.Done = func(s *bench.Scenario) {
			if *bar != nil {
				(*bar).Clear()
			}
			bench.WriteScenario(stdout, s)
		}
	}
	rep, err := bench.Run(cfg)
	if *bar != nil {
		(*bar).Finish()
		fmt.Fprintln(os.Stderr)
	}
	if err != nil {
		return err
	}
	if o.out != "" {
		if err := bench.WriteDir(o.out, rep); err != nil {
			return fmt.Errorf("write report to %s: %w", o.out, err)
		}
	}
	if o.asJSON {
		return bench.WriteJSON(stdout, rep)
	}
	bench.WriteSummary(stdout, rep)
	if o.out != "" {
		fmt.Fprintf(stdout, "\nreport: %s/index.html, %s/results.json\n", o.out, o.out)
	}
	return nil
}

// cleanupOnSignal makes Ctrl-C or SIGTERM remove the cgroups of the
// scenario that runs (their children are killed with them), then exit;
// the returned func stops it.
func cleanupOnSignal() func() {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		sig, ok := <-sigs
		if !ok {
			return
		}
		fmt.Fprintf(os.Stderr, "\ncpuwork bench: %v: removing the bench's cgroups\n", sig)
		bench.Cleanup()
		os.Exit(128 + int(sig.(syscall.Signal)))
	}()
	return func() { signal.Stop(sigs) }
}

// progress sets cfg's step reporter: a progress bar on a terminal, one
// plain line per step elsewhere (logs and CI). The bar, made at the first
// step, is returned by reference.
func progress(cfg *bench.Config) **progressbar.ProgressBar {
	var bar *progressbar.ProgressBar
	tty := term.IsTerminal(int(os.Stderr.Fd()))
	cfg.Step = func(done, total int, what string) {
		if total == 0 { // a notice, not a step
			fmt.Fprintln(os.Stderr, what)
			return
		}
		if !tty {
			fmt.Fprintf(os.Stderr, "[%d/%d] %s\n", done+1, total, what)
			return
		}
		if bar == nil {
			bar = progressbar.NewOptions(total,
				progressbar.OptionSetWriter(os.Stderr),
				progressbar.OptionSetWidth(30),
				progressbar.OptionShowCount(),
				progressbar.OptionSetPredictTime(true),
				progressbar.OptionClearOnFinish())
		}
		bar.Describe(what)
		bar.Set(done)
	}
	return &bar
}

// checkWritable creates dir if needed and writes and removes a file in it.
func checkWritable(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".cpuwork-write-check-*")
	if err != nil {
		return err
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

// loopbackTarget accepts only an http URL without user info whose host
// is a loopback IP or resolves to loopback addresses only: the load
// generator sends request bodies and must never reach another machine
// (a string prefix let http://127.0.0.1@192.0.2.2/ and http://127.evil.example/
// through).
func loopbackTarget(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("target %q: %w", raw, err)
	}
	if u.Scheme != "http" || u.User != nil || u.Host == "" || u.Opaque != "" {
		return fmt.Errorf("target %q: want http://HOST:PORT on loopback, without user info", raw)
	}
	host := u.Hostname()
	var ips []net.IP
	if ip := net.ParseIP(host); ip != nil {
		ips = []net.IP{ip}
	} else if host == "localhost" {
		addrs, err := net.LookupIP(host)
		if err != nil {
			return fmt.Errorf("target %q: resolve %s: %w", raw, host, err)
		}
		ips = addrs
	} else {
		return fmt.Errorf("target %q: host %q is neither a loopback IP nor localhost", raw, host)
	}
	if len(ips) == 0 {
		return fmt.Errorf("target %q: %s resolves to nothing", raw, host)
	}
	for _, ip := range ips {
		if !ip.IsLoopback() {
			return fmt.Errorf("target %q: %s is %s, not a loopback address", raw, host, ip)
		}
	}
	return nil
}

// loadgenCmd is the hidden load generator process of the service scenario.
func loadgenCmd() *cobra.Command {
	var target, smallBody, largeBody string
	var rate float64
	var workers int
	var onlySmall, onlyLarge bool
	var duration, stepAt, timeout time.Duration
	var fromRate float64
	var mixSeed uint64
	var tenants int
	var floodShare float64
	cmd := &cobra.Command{
		Use:    "loadgen",
		Short:  "open-loop HTTP load for bench's service scenario (internal)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := loopbackTarget(target); err != nil {
				return fmt.Errorf("loadgen: %w", err)
			}
			var bodies [2][]byte
			for i, f := range []string{smallBody, largeBody} {
				if f == "" {
					continue
				}
				b, err := os.ReadFile(f)
				if err != nil {
					return fmt.Errorf("loadgen: %w", err)
				}
				bodies[i] = b
			}
			return bench.LoadGen(cmd.OutOrStdout(), bench.LoadSpec{Base: target, Rate: rate, Duration: duration,
				SmallBody: bodies[0], LargeBody: bodies[1], Workers: workers, OnlySmall: onlySmall, OnlyLarge: onlyLarge,
				Step: bench.StepLoad{From: fromRate, At: stepAt}, Timeout: timeout, MixSeed: mixSeed,
				Tenants: tenants, FloodShare: floodShare})
		},
	}
	cmd.Flags().StringVar(&target, "target", "", "base URL on loopback, e.g. http://127.0.0.1:8080")
	cmd.Flags().StringVar(&smallBody, "small-body", "", "file whose bytes every small request POSTs (default: GET)")
	cmd.Flags().StringVar(&largeBody, "large-body", "", "file whose bytes every large request POSTs (default: GET)")
	cmd.Flags().Float64Var(&rate, "rate", 0, "requests per second (constant pacer); 0 with --workers: closed loop")
	cmd.Flags().BoolVar(&onlySmall, "only-small", false, "send every request to /small (default: 90 small and 10 large in each block of 100, in a random order)")
	cmd.Flags().BoolVar(&onlyLarge, "only-large", false, "send every request to /large")
	cmd.Flags().Uint64Var(&mixSeed, "mix-seed", 0, "seed of the order of the small/large mix (the same seed sends the same sequence of kinds)")
	cmd.Flags().IntVar(&tenants, "tenants", 0, "send each request for one of this many tenants (?tenant=tK): t0 with probability --flood-share, the others evenly (0: no tenants)")
	cmd.Flags().Float64Var(&floodShare, "flood-share", 0, "with --tenants: the share of requests from t0, the flooding tenant")
	cmd.Flags().IntVar(&workers, "workers", 0, "closed loop: this many clients, each sending its next request when the last is answered (needs --rate 0)")
	cmd.Flags().DurationVar(&duration, "duration", 0, "attack duration")
	cmd.Flags().Float64Var(&fromRate, "from-rate", 0, "with --step-at: requests per second before the step (--rate after it)")
	cmd.Flags().DurationVar(&stepAt, "step-at", 0, "when the offered load steps from --from-rate to --rate (0: no step)")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "how long a client waits for an answer before it gives up (0: 30s)")
	return cmd
}

// inferenceServerCmd is the hidden server process of the inference
// scenario's quota cases.
func inferenceServerCmd() *cobra.Command {
	var variant string
	var slo, perImage time.Duration
	cmd := &cobra.Command{
		Use:    "inference-server",
		Short:  "serve a variant of bench's inference scenario until stdin closes (internal)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return bench.ServeInference(cmd.OutOrStdout(), os.Stdin, variant, slo, perImage)
		},
	}
	cmd.Flags().StringVar(&variant, "variant", "cpuwork", "naive, pool or cpuwork")
	cmd.Flags().DurationVar(&slo, "slo", 100*time.Millisecond, "the service's latency objective: cpuwork's requests get it as their target")
	cmd.Flags().DurationVar(&perImage, "per-image", 10*time.Millisecond, "an image's run time on one core: cpuwork's expected run time of a request")
	return cmd
}

// quotaChildCmd is the hidden child process of the quota scenario.
func quotaChildCmd() *cobra.Command {
	var mode string
	var rounds, goroutines, iters int
	cmd := &cobra.Command{
		Use:    "quota-child",
		Short:  "rounds of CPU work for bench's quota scenario (internal)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return bench.QuotaChild(cmd.OutOrStdout(), mode, rounds, goroutines, iters)
		},
	}
	cmd.Flags().StringVar(&mode, "mode", "goroutines", "goroutines or cpuwork")
	cmd.Flags().IntVar(&rounds, "rounds", 10, "rounds to report")
	cmd.Flags().IntVar(&goroutines, "goroutines", 10, "tasks per round")
	cmd.Flags().IntVar(&iters, "iters", 1, "spin iterations per task (calibrated by the parent)")
	return cmd
}

// probeCmd and hogCmd are the hidden child processes of the neighbour scenario.
func probeCmd() *cobra.Command {
	var interval, duration time.Duration
	var iters int
	cmd := &cobra.Command{
		Use: "probe", Hidden: true, Args: cobra.NoArgs,
		Short: "latency probe for bench's neighbour scenario (internal)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return bench.ProbeChild(cmd.OutOrStdout(), interval, duration, iters)
		},
	}
	cmd.Flags().DurationVar(&interval, "interval", 10*time.Millisecond, "time between probes")
	cmd.Flags().DurationVar(&duration, "duration", time.Second, "how long to probe")
	cmd.Flags().IntVar(&iters, "iters", 1, "spin iterations per probe (calibrated by the parent)")
	return cmd
}

func hogCmd() *cobra.Command {
	var threads int
	var duration time.Duration
	cmd := &cobra.Command{
		Use: "hog", Hidden: true, Args: cobra.NoArgs,
		Short: "CPU hog for bench's neighbour scenario (internal)",
		RunE:  func(cmd *cobra.Command, _ []string) error { return bench.HogChild(threads, duration) },
	}
	cmd.Flags().IntVar(&threads, "threads", 2, "spinning threads")
	cmd.Flags().DurationVar(&duration, "duration", time.Second, "how long to spin")
	return cmd
}

// quotaTimelineCmd is the hidden command that draws docs/quota-timeline.png:
// the quota scenario's rounds under a quota with floor, ceil and the
// fractional slot, quota used and throttled periods over time.
func quotaTimelineCmd() *cobra.Command {
	var out, log string
	var quota float64
	var duration time.Duration
	cmd := &cobra.Command{
		Use:    "quota-timeline",
		Short:  "plot quota used and throttling over time for floor, ceil and the fractional slot (needs root)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if log != "" {
				f, err := os.Create(log)
				if err != nil {
					return err
				}
				defer f.Close()
				w = f
			}
			return bench.QuotaTimeline(exe, out, w, quota, duration)
		},
	}
	cmd.Flags().StringVar(&out, "out", "quota-timeline.png", "PNG to write")
	cmd.Flags().StringVar(&log, "log", "", "file for the raw samples (policy, seconds, quota used, throttled, periods); default stdout")
	cmd.Flags().Float64Var(&quota, "cpus", 1.25, "quota in cores")
	cmd.Flags().DurationVar(&duration, "duration", 3*time.Second, "time per policy")
	return cmd
}

// fleetReplicaCmd is the fleet scenario's replica, run in its cgroup.
func fleetReplicaCmd() *cobra.Command {
	var variant string
	var iters int
	var objective time.Duration
	cmd := &cobra.Command{
		Use: "fleet-replica", Hidden: true, Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return bench.FleetReplica(variant, iters, objective, os.Stdin, cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&variant, "variant", "cpuwork", "cpuwork or sem")
	cmd.Flags().IntVar(&iters, "iters", 1, "spin iterations per call")
	cmd.Flags().DurationVar(&objective, "objective", 500*time.Millisecond, "the calls' latency objective")
	return cmd
}
