package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cpuwork/cpuwork/cmd/cpuwork/internal/cli"
	"github.com/cpuwork/cpuwork/cmd/cpuwork/internal/doctor"
	"github.com/cpuwork/cpuwork/cmd/cpuwork/internal/sim"
	"github.com/cpuwork/cpuwork/cpuworkhttp"
	"github.com/cpuwork/cpuwork/internal/throttle"
	"github.com/spf13/cobra"
)

func simulateCmd() *cobra.Command {
	var o simFlags
	cmd := &cobra.Command{
		Use:   "simulate",
		Short: "Replay a workload through cpuwork's admission code and the usual alternatives on a virtual clock",
		Long: `Replay a workload on a virtual clock through cpuwork's own admission code
(the executor's door, ordering, class shares, key shares, shedding and late
budget, driven through the protocol the executor uses; a closed loop's tasks
hand their slot over at each Checkpoint as the executor's do) and through
what teams use instead: a goroutine per request (the Go scheduler's 10 ms
time slices), a worker pool fed by a channel, a semaphore, a bounded pool
answering 503, and, when named, a semaphore whose waiters leave at the
objective, a pool without a queue, a pool with a queue of 2 per slot, a
semaphore per class, models of failsafe-go's prioritized
adaptive limiter and of concurrency-limits' Gradient2, and the clairvoyant
limit. Each task holds one slot for its CPU time; the slots are the cores.
The answer is exact — the same workload gives the same figures on any
machine — and covers only what the admission policy decides. Not modelled:
the netpoller, a fractional quota's throttling and cpuwork's pacer of
it (except with --cpus and --throttle), the garbage collector, and other
threads on the cores (the real-machine bench measures them).

Without --trace it replays the bench's scenarios with the sizes their default
run measured (--scenario, --load as multiples of capacity). With --trace it
replays a CSV of requests (header arrival_ms,class,cpu_ms[,deadline_ms][,kind];
class is critical, interactive, batch or background). With --from it fetches
the requests a service recorded (cpuwork.Options.Record, served by
cpuworkhttp.TraceHandler at /debug/cpuwork/trace; Observe records them
without enforcing anything) and replays them on the service's slots under
the targets it recorded: what each policy would have done with its traffic.
With --matrix it runs the declared policy matrix — 1 to 64 slots, five
service-time shapes, seven loads, three request mixes, two objectives — and
prints a table per dimension, the targets, and every cell where cpuwork is
worse than the best peer (--json: every cell):

  cpuwork simulate
  cpuwork simulate --trace requests.csv --slots 4 --objective interactive=250ms
  cpuwork simulate --from http://127.0.0.1:8080
  cpuwork simulate --matrix`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.matrix || o.matrixFile != "" {
				for _, fl := range []string{"scenario", "load", "trace", "from", "cpus", "slots", "objective", "policies", "duration", "seed", "queue-limit", "targets", "declared", "throttle"} {
					if cmd.Flags().Changed(fl) {
						return cli.UsageError(fmt.Errorf("--matrix runs the declared grid: --%s does not apply (the matrix file sets the cells and the policies)", fl))
					}
				}
				return runMatrix(cmd.OutOrStdout(), o.matrixFile, o.asJSON)
			}
			wls, err := o.workloads(cmd)
			if err != nil {
				return err
			}
			return o.replay(cmd.OutOrStdout(), wls)
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&o.scenarios, "scenario", scenarioNames(true), "the bench scenarios to replay: "+strings.Join(scenarioNames(false), ", ")+" (step, realserver-step's, only when named)")
	f.Float64SliceVar(&o.loads, "load", nil, "offered load as multiples of capacity (the slots over the mean CPU time per request), for service and inference (default 0.8,2) and step's level after its step (default 1.4,3)")
	f.Lookup("load").DefValue = "" // each scenario has its own, said above: not "(default [])"
	f.Uint64Var(&o.seed, "seed", 1, "seed of the scenarios' arrivals and request mix")
	f.DurationVar(&o.duration, "duration", 0, "how long arrivals run (scenarios: 10s; a trace: until its last arrival)")
	f.Float64Var(&o.cpus, "cpus", 0, "with --trace or --from: the CPUs the slots share when fewer (a fractional quota, e.g. 1.5 for 2 slots): each request's CPU time is stretched by slots/cpus, a slot's pace while every slot is busy under the quota (with --throttle: the quota's periods instead)")
	f.BoolVar(&o.throttle, "throttle", false, "with --cpus: replay the quota as the kernel enforces it — each running request on a CPU of its own, all frozen to the end of the 100 ms period once its quota is used — instead of stretching CPU times (cpuwork's pacer runs as the executor's default)")
	f.StringVar(&o.from, "from", "", "base URL of a service that records its requests (cpuwork.Options.Record, cpuworkhttp.TraceHandler): replay its last requests on its slots under the targets it recorded")
	f.StringVar(&o.trace, "trace", "", "CSV of requests to replay (arrival_ms,class,cpu_ms[,deadline_ms][,kind][,key][,target_ms][,outcome][,queue_wait_ms]; what Executor.WriteTrace writes)")
	f.IntVar(&o.slots, "slots", runtime.NumCPU(), "with --trace: the cores the service has (tasks run at once)")
	f.StringSliceVar(&o.objectives, "objective", nil, "with --trace: a class's latency objective, class=duration (e.g. interactive=250ms); repeatable")
	f.BoolVar(&o.targets, "targets", true, "with --trace: cpuwork's requests carry their class's objective as their target (cpuworkhttp's Objective)")
	f.BoolVar(&o.declared, "declared", false, "with --trace: cpuwork's requests give their CPU time as their expected run time (cpuworkhttp's Service)")
	f.IntVar(&o.queueLimit, "queue-limit", 64, "the bounded pool's queue (pool-503; step's default is 4, imgproxy's)")
	f.StringSliceVar(&o.policies, "policies", policyNames(false), "policies to replay (known: "+strings.Join(policyNames(true), ", ")+")")
	f.BoolVar(&o.asJSON, "json", false, "print the results as JSON")
	f.BoolVar(&o.matrix, "matrix", false, "run the declared policy matrix (slots 1-64, five service-time shapes, seven loads, three mixes, two objectives; the file is printed by --matrix-file -) through cpuwork, the modelled peers and the clairvoyant limit")
	f.StringVar(&o.matrixFile, "matrix-file", "", "run the matrix this file declares instead of the built-in one (\"-\": print the built-in one and exit)")
	return cmd
}

// simFlags are simulate's flags.
type simFlags struct {
	scenarios  []string
	loads      []float64
	seed       uint64
	duration   time.Duration
	trace      string
	from       string
	cpus       float64
	throttle   bool
	slots      int
	objectives []string
	targets    bool
	declared   bool
	queueLimit int
	policies   []string
	asJSON     bool
	matrix     bool
	matrixFile string
}

// workloads are the workloads the flags name: a trace's, or the bench
// scenarios' at their loads; or a usage error.
func (o *simFlags) workloads(cmd *cobra.Command) ([]*sim.Workload, error) {
	for _, p := range o.policies {
		if !sim.KnownPolicy(p) {
			return nil, cli.UsageError(fmt.Errorf("--policies: no policy %q (known: %s)", p, strings.Join(policyNames(true), ", ")))
		}
	}
	if o.queueLimit < 1 {
		return nil, cli.UsageError(fmt.Errorf("--queue-limit %d: want at least 1", o.queueLimit))
	}
	changed := cmd.Flags().Changed
	if o.from != "" {
		if o.trace != "" || changed("scenario") || changed("load") {
			return nil, cli.UsageError(errors.New("--from replays the service's recorded requests: --trace, --scenario and --load do not apply"))
		}
		return o.fromService(cmd)
	}
	if o.trace != "" {
		if changed("scenario") || changed("load") {
			return nil, cli.UsageError(errors.New("--trace replays the file: --scenario and --load are for the bench's scenarios"))
		}
		wl, note, err := o.traceWorkload(context.Background(), o.trace, o.slots)
		if err != nil {
			return nil, err
		}
		if note != "" {
			fmt.Fprintln(cmd.ErrOrStderr(), "note:", note)
		}
		return []*sim.Workload{wl}, nil
	}
	if changed("slots") || changed("objective") || changed("cpus") || changed("throttle") {
		return nil, cli.UsageError(errors.New("--slots, --objective, --cpus and --throttle are for a --trace or --from: the scenarios set their own"))
	}
	var wls []*sim.Workload
	for _, name := range o.scenarios {
		sc, ok := scenarioInfo(name)
		if !ok {
			return nil, cli.UsageError(fmt.Errorf("no scenario %q to simulate (known: %s)", name, strings.Join(scenarioNames(false), ", ")))
		}
		levels := []float64{1} // a fixed load: the level is ignored
		switch {
		case sc.Loads != nil && changed("load"):
			levels = o.loads
		case sc.Loads != nil:
			levels = sc.Loads
		}
		for _, l := range levels {
			if l <= 0 || math.IsNaN(l) || math.IsInf(l, 0) {
				return nil, cli.UsageError(fmt.Errorf("--load %v: want a positive multiple of capacity", l))
			}
			wl, err := sim.Scenario(name, l, o.duration, o.seed)
			if err != nil {
				return nil, cli.UsageError(err)
			}
			if changed("queue-limit") {
				wl.QueueLimit = o.queueLimit
			}
			wls = append(wls, wl)
		}
	}
	return wls, nil
}

// replay runs wls through the policies and prints the reports to w.
func (o *simFlags) replay(w io.Writer, wls []*sim.Workload) error {
	var out []simReport
	for _, wl := range wls {
		rep := simReport{Workload: wl.Name, Slots: wl.Slots, Seconds: wl.Duration.Seconds(), stepped: wl.StepAt > 0}
		for _, p := range o.policies {
			r, err := sim.Run(wl, p)
			if err != nil {
				return err
			}
			rep.results = append(rep.results, r)
		}
		out = append(out, rep)
	}
	if o.asJSON {
		return writeSimJSON(w, out)
	}
	for i, rep := range out {
		if i > 0 {
			fmt.Fprintln(w)
		}
		printSim(w, rep, o.seed, o.trace == "" && o.from == "")
	}
	return nil
}

// runMatrix runs a declared matrix (file "" : the built-in one) and
// prints its report, or every cell as JSON.
func runMatrix(w io.Writer, file string, asJSON bool) error {
	text := sim.DeclaredMatrix
	switch file {
	case "":
	case "-":
		_, err := io.WriteString(w, text)
		return err
	default:
		b, err := os.ReadFile(file)
		if err != nil {
			return cli.UsageError(err)
		}
		text = string(b)
	}
	m, err := sim.ParseMatrix(strings.NewReader(text))
	if err != nil {
		return cli.UsageError(err)
	}
	t0 := time.Now()
	res, err := m.Run(runtime.GOMAXPROCS(0))
	if err != nil {
		return err
	}
	if asJSON {
		return sim.WriteMatrixJSON(w, res)
	}
	sim.WriteMatrixReport(w, m, res, time.Since(t0))
	return nil
}

// policyNames lists the policies replayed by default, or all of them
// (named: also those replayed only when named).
func policyNames(named bool) []string {
	var ns []string
	for _, p := range sim.Policies {
		if named || !p.Named {
			ns = append(ns, p.Name)
		}
	}
	return ns
}

// scenarioNames lists the scenarios simulate replays (byDefault: those it
// replays when none is named).
func scenarioNames(byDefault bool) []string {
	var ns []string
	for _, s := range sim.Scenarios {
		if !byDefault || !s.Named {
			ns = append(ns, s.Name)
		}
	}
	return ns
}

func scenarioInfo(name string) (sim.ScenarioInfo, bool) {
	for _, s := range sim.Scenarios {
		if s.Name == name {
			return s, true
		}
	}
	return sim.ScenarioInfo{}, false
}

// fromTimeout bounds --from's two downloads together.
const fromTimeout = 2 * time.Minute

// fromService is --from's workload: the trace the service at o.from
// serves (cpuworkhttp.TracePath), replayed on its slots (its
// /debug/cpuwork, unless --slots is given) under the targets it recorded
// (unless --objective is given).
func (o *simFlags) fromService(cmd *cobra.Command) ([]*sim.Workload, error) {
	base := strings.TrimSuffix(o.from, "/")
	if u, err := url.Parse(base); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, cli.UsageError(fmt.Errorf("--from %q: want the service's base URL, http://HOST:PORT", o.from))
	}
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, fromTimeout)
	defer cancel()
	slots := o.slots
	var notes []string
	if !cmd.Flags().Changed("slots") {
		view, err := doctor.FetchView(ctx, base)
		if err != nil {
			return nil, fmt.Errorf("%w (or give --slots)", err)
		}
		if view == nil || view.Slots < 1 {
			return nil, fmt.Errorf("%s/debug/cpuwork serves no executor: mount schedstat.Handler with the executor's Stats there, or give --slots", base)
		}
		slots = view.Slots
		notes = append(notes, fmt.Sprintf("%s: %d slots, the executor's (its /debug/cpuwork)", base, slots))
	}
	wl, note, err := o.traceWorkload(ctx, base+cpuworkhttp.TracePath, slots)
	if err != nil {
		return nil, err
	}
	if note != "" {
		notes = append(notes, note)
	}
	for _, n := range notes {
		fmt.Fprintln(cmd.ErrOrStderr(), "note:", n)
	}
	return []*sim.Workload{wl}, nil
}

// traceWorkload reads a --trace file, or a trace at an http(s) URL
// (--from), into a workload; note, when not empty, says what the replay
// took from the trace or changed in it (sorted, sized, objectives).
func (o *simFlags) traceWorkload(ctx context.Context, path string, slots int) (wl *sim.Workload, note string, err error) {
	objectives, targets, declared, queueLimit, d := o.objectives, o.targets, o.declared, o.queueLimit, o.duration
	if slots < 1 || slots > sim.MaxSlots {
		return nil, "", cli.UsageError(fmt.Errorf("--slots %d: want 1 to %d (the executor's bound)", slots, sim.MaxSlots))
	}
	if queueLimit < 1 {
		return nil, "", cli.UsageError(fmt.Errorf("--queue-limit %d: want at least 1", queueLimit))
	}
	wl = &sim.Workload{Name: path, Slots: slots, Targets: targets, Declared: declared, QueueLimit: queueLimit}
	if o.cpus < 0 || o.cpus > float64(slots) {
		return nil, "", cli.UsageError(fmt.Errorf("--cpus %g: want more than 0 and at most --slots (%d)", o.cpus, slots))
	}
	if o.throttle && o.cpus == 0 {
		return nil, "", cli.UsageError(errors.New("--throttle replays the quota --cpus gives: give --cpus too"))
	}
	for _, ob := range objectives {
		name, val, ok := strings.Cut(ob, "=")
		if !ok {
			return nil, "", cli.UsageError(fmt.Errorf("--objective %q: want class=duration, e.g. interactive=250ms", ob))
		}
		c, err := sim.ParseClass(strings.TrimSpace(name))
		if err != nil {
			return nil, "", cli.UsageError(fmt.Errorf("--objective %q: %w", ob, err))
		}
		dv, err := time.ParseDuration(strings.TrimSpace(val))
		if err != nil || dv <= 0 {
			return nil, "", cli.UsageError(fmt.Errorf("--objective %q: want a positive duration such as 250ms", ob))
		}
		wl.Objective[c] = dv
	}
	var r io.Reader
	if from := strings.HasPrefix(path, "http://") || strings.HasPrefix(path, "https://"); from {
		body, err := doctor.Get(ctx, path, "mount cpuworkhttp.TraceHandler there and set cpuwork.Options.Record")
		if err != nil {
			return nil, "", err
		}
		defer body.Close()
		r = body
	} else {
		f, err := os.Open(path)
		if err != nil {
			return nil, "", err
		}
		defer f.Close()
		r = f
	}
	tr, err := sim.ReadTrace(r)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", path, err)
	}
	wl.Requests = tr.Requests
	var notes []string
	if tr.Unsorted > 0 {
		notes = append(notes, fmt.Sprintf("%s: line %d arrives before the line above it: replayed sorted by arrival", path, tr.Unsorted))
	}
	if tr.Estimated > 0 {
		notes = append(notes, fmt.Sprintf("%s: %d of %d CPU times are estimates (the requests ran beside more requests than Ps: their share of the process's CPU, right on the whole, not request by request)", path, tr.Estimated, len(wl.Requests)))
	}
	if o.cpus > 0 && o.cpus < float64(slots) && o.throttle {
		wl.Quota, wl.Pace = o.cpus, true
		notes = append(notes, fmt.Sprintf("%s: %d slots under a CFS quota of %g CPUs (--cpus, --throttle): each running request on a CPU of its own, every one frozen to the 100 ms period's end once the period's quota is used; cpuwork's pacer of the fractional slot runs as the executor's default (it paces where a throttled period's pause, %v here, would miss the tightest objective)", path, slots, o.cpus, throttle.Pause(o.cpus, float64(slots), 100*time.Millisecond)))
	} else if o.cpus > 0 && o.cpus < float64(slots) {
		stretch := float64(slots) / o.cpus
		for i := range wl.Requests {
			wl.Requests[i].CPU = time.Duration(float64(wl.Requests[i].CPU) * stretch)
		}
		notes = append(notes, fmt.Sprintf("%s: %d slots share %g CPUs (--cpus): every CPU time stretched %.3gx, a slot's pace while all are busy under the quota", path, slots, o.cpus, stretch))
	}
	if tr.Sized > 0 {
		notes = append(notes, fmt.Sprintf("%s: %d of %d requests never ran where they were recorded: each sized at the median CPU time of its class's requests that ran", path, tr.Sized, len(wl.Requests)))
	}
	if len(objectives) == 0 {
		var got []string
		for c, d := range tr.Targets {
			if d > 0 {
				wl.Objective[c] = d
				got = append(got, fmt.Sprintf("%s=%v", sim.Class(c), d))
			}
		}
		if len(got) > 0 {
			notes = append(notes, fmt.Sprintf("%s: objectives from the targets it recorded: %s (--objective sets others)", path, strings.Join(got, ", ")))
		}
	}
	if n := len(wl.Requests) - tr.Recorded[0]; n > 0 {
		notes = append(notes, fmt.Sprintf("%s: where it was recorded: %d served, %d refused, %d refused for their target, %d gave up", path,
			tr.Recorded[1], tr.Recorded[2], tr.Recorded[3], tr.Recorded[4]))
	}
	note = strings.Join(notes, "\nnote: ")
	wl.Duration = d
	if d <= 0 {
		wl.Duration = max(wl.Requests[len(wl.Requests)-1].At, time.Millisecond)
	}
	return wl, note, nil
}

// simReport is one workload's replay through every policy.
type simReport struct {
	Workload string
	Slots    int
	Seconds  float64
	results  []*sim.Result
	stepped  bool
}

func printSim(w io.Writer, rep simReport, seed uint64, scenario bool) {
	src := ""
	if scenario {
		src = fmt.Sprintf(", arrivals from seed %d", seed)
	}
	fmt.Fprintf(w, "# %s: %d slots, %.3g s%s; exact (a virtual clock: no noise, no interval); the admission policy only (no netpoll, throttling or other threads)\n", rep.Workload, rep.Slots, rep.Seconds, src)
	fmt.Fprintf(w, "# within objective: %s; p99 all counts a refused or given-up request as never answered (\"never\": over 1 %% were not)\n", objectives(rep.results))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tkind\trequests\tserved\trefused\tgave up\tp50 served\tp99 served\tp99 all\twithin objective\tgoodput CPU-s/s\t")
	row := func(policy string, g sim.Group) {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%.3f\t\n", policy, g.Kind, g.Requests, g.Served, g.Refused, g.Expired,
			simMS(g.P50), simMS(g.P99), simMS(g.P99All), share(g.Within, g.Requests), g.Goodput)
	}
	for _, r := range rep.results {
		for _, g := range r.Groups {
			row(r.Policy, g)
		}
		for _, c := range r.Classes { // a class of several kinds: its total too
			n := 0
			for _, g := range r.Groups {
				if g.Class == c.Class {
					n++
				}
			}
			if n > 1 {
				c.Kind = "all " + c.Kind
				row(r.Policy, c)
			}
		}
	}
	tw.Flush()
	for _, line := range simSummary(rep.results, rep.stepped) {
		fmt.Fprintln(w, line)
	}
	if !scenario {
		for _, line := range traceAnswer(rep.results) {
			fmt.Fprintln(w, line)
		}
	}
}

// traceAnswer is a trace replay's answer per class with an objective:
// the requests cpuwork would have served within it, against a goroutine
// per request (a Go service without admission, as it ran while
// observed) and the best other policy.
func traceAnswer(rs []*sim.Result) []string {
	by := map[string]*sim.Result{}
	for _, r := range rs {
		by[r.Policy] = r
	}
	cw, gr := by["cpuwork"], by["goroutines"]
	if cw == nil {
		return nil
	}
	var lines []string
	for ci, g := range cw.Classes {
		if g.Objective <= 0 || g.Requests == 0 {
			continue
		}
		pct := func(n int) float64 { return 100 * float64(n) / float64(g.Requests) }
		line := fmt.Sprintf("answer, %s: cpuwork would have served %d of %d requests (%.1f %%) within %v", g.Kind, g.Within, g.Requests, pct(g.Within), g.Objective)
		if gr != nil && ci < len(gr.Classes) {
			o := gr.Classes[ci]
			line += fmt.Sprintf("; a goroutine per request (the service without admission) %d (%.1f %%): %+.1f points", o.Within, pct(o.Within), pct(g.Within)-pct(o.Within))
		}
		best, who := -1, ""
		for _, r := range rs {
			if r != cw && r != gr && ci < len(r.Classes) && r.Classes[ci].Within > best {
				best, who = r.Classes[ci].Within, r.Policy
			}
		}
		if who != "" {
			line += fmt.Sprintf("; the best other policy, %s, %d (%.1f %%)", who, best, pct(best))
		}
		lines = append(lines, line)
	}
	return lines
}

// objectives says what "within objective" means for each class of the
// results: served within its objective, or (none) by the workload's end.
func objectives(rs []*sim.Result) string {
	if len(rs) == 0 {
		return "-"
	}
	var parts []string
	for _, c := range rs[0].Classes {
		if c.Objective > 0 {
			parts = append(parts, fmt.Sprintf("%s served within %v of arrival", c.Kind, c.Objective))
		} else {
			parts = append(parts, fmt.Sprintf("%s served by the workload's end (no objective given)", c.Kind))
		}
	}
	return strings.Join(parts, ", ")
}

// simSummary compares cpuwork with the best other policy per class: the
// work served within the class's objective (all work served without
// one; higher is better) and the p99 of every request (a refused one
// never answered) against every policy; the p99 of the served requests
// (lower is better) only against policies that served at least 95 % as
// large a share as cpuwork did, since serving fewer makes it lower.
func simSummary(rs []*sim.Result, stepped bool) []string {
	var cw *sim.Result
	for _, r := range rs {
		if r.Policy == "cpuwork" {
			cw = r
		}
	}
	if cw == nil || len(rs) < 2 {
		return nil
	}
	served := func(g sim.Group) float64 { return float64(g.Served) / float64(max(g.Requests, 1)) }
	var lines []string
	for ci, g := range cw.Classes {
		type metric struct {
			name   string
			get    func(sim.Group) float64
			higher bool
			fmt    func(float64) string
			fair   func(sim.Group) bool
		}
		work := "work served"
		if g.Objective > 0 {
			work = "goodput within the objective"
		}
		all := func(sim.Group) bool { return true }
		ms := []metric{
			{work, func(g sim.Group) float64 { return g.Goodput }, true, func(x float64) string { return fmt.Sprintf("%.3f CPU-s/s", x) }, all},
			{"p99 of all requests", func(g sim.Group) float64 { return g.P99All }, false, simMS, all},
			{"p99 of served", func(g sim.Group) float64 { return g.P99 }, false, simMS, func(o sim.Group) bool { return served(o) >= 0.95*served(g) }},
		}
		var parts []string
		for _, m := range ms {
			mine := m.get(g)
			best, who := math.NaN(), ""
			for _, r := range rs {
				if r == cw || ci >= len(r.Classes) || !m.fair(r.Classes[ci]) {
					continue
				}
				v := m.get(r.Classes[ci])
				if math.IsNaN(v) {
					continue
				}
				if who == "" || (m.higher && v > best) || (!m.higher && v < best) {
					best, who = v, r.Policy
				}
			}
			if who == "" {
				continue
			}
			switch {
			case math.IsInf(mine, 1) && math.IsInf(best, 1):
				parts = append(parts, fmt.Sprintf("%s: over 1 %% never answered, as with %s", m.name, who))
			case math.IsInf(mine, 1):
				parts = append(parts, fmt.Sprintf("%s: over 1 %% never answered, against %s (%s)", m.name, m.fmt(best), who))
			case math.IsInf(best, 1):
				parts = append(parts, fmt.Sprintf("%s %s, where every other policy left over 1 %% never answered", m.name, m.fmt(mine)))
			default:
				parts = append(parts, fmt.Sprintf("%s %s against %s (%s)%s", m.name, m.fmt(mine), m.fmt(best), who, ratioNote(mine, best)))
			}
		}
		lines = append(lines, fmt.Sprintf("%s, cpuwork against the best other policy: %s; cpuwork shed %.1f %%", g.Kind, strings.Join(parts, "; "), g.Shed()*100))
		if stepped {
			var rec []string
			for _, r := range rs {
				if ci < len(r.Classes) && r.Classes[ci].Objective > 0 {
					rec = append(rec, fmt.Sprintf("%s %v", r.Policy, r.Classes[ci].Recovery))
				}
			}
			if len(rec) > 0 {
				lines = append(lines, fmt.Sprintf("%s, after the step: served latency back under the objective (the end of the last %v window, by arrival, with a request served late or given up; 0s: none) — %s", g.Kind, 200*time.Millisecond, strings.Join(rec, ", ")))
			}
		}
	}
	return lines
}

func ratioNote(a, b float64) string {
	if b == 0 || math.IsInf(a, 0) || math.IsInf(b, 0) || math.IsNaN(a) || math.IsNaN(b) {
		return ""
	}
	return fmt.Sprintf(" = %.2fx", a/b)
}

func share(n, of int) string {
	if of == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(n)/float64(of))
}

// simMS prints seconds as ms; never answered (+Inf) as "never", none as "-".
func simMS(s float64) string {
	switch {
	case math.IsNaN(s):
		return "-"
	case math.IsInf(s, 1):
		return "never"
	}
	return strconv.FormatFloat(s*1e3, 'f', 2, 64) + " ms"
}

// simGroupJSON is a Group in JSON: latencies in seconds, null when none
// or never answered.
type simGroupJSON struct {
	Kind      string   `json:"kind"`
	Class     string   `json:"class"`
	Requests  int      `json:"requests"`
	Served    int      `json:"served"`
	Refused   int      `json:"refused"`
	GaveUp    int      `json:"gave_up"`
	P50       *float64 `json:"p50_served_s"`
	P99       *float64 `json:"p99_served_s"`
	P99All    *float64 `json:"p99_all_s"`
	Mean      *float64 `json:"mean_served_s"`
	Makespan  float64  `json:"makespan_s"` // the last served request's end, from the workload's start
	Within    int      `json:"within_objective"`
	Objective float64  `json:"objective_s"`
	Goodput   float64  `json:"goodput_cpu_s_per_s"`
	Recovery  float64  `json:"recovery_s"` // after a step; 0: none or no step
}

func writeSimJSON(w io.Writer, reps []simReport) error {
	fin := func(x float64) *float64 {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil
		}
		return &x
	}
	conv := func(gs []sim.Group) []simGroupJSON {
		var out []simGroupJSON
		for _, g := range gs {
			out = append(out, simGroupJSON{Kind: g.Kind, Class: g.Class.String(), Requests: g.Requests, Served: g.Served, Refused: g.Refused, GaveUp: g.Expired,
				P50: fin(g.P50), P99: fin(g.P99), P99All: fin(g.P99All), Mean: fin(g.Mean), Makespan: g.Makespan, Within: g.Within, Objective: g.Objective.Seconds(), Goodput: g.Goodput, Recovery: g.Recovery.Seconds()})
		}
		return out
	}
	type pol struct {
		Policy  string         `json:"policy"`
		Kinds   []simGroupJSON `json:"kinds"`
		Classes []simGroupJSON `json:"classes"`
	}
	type wl struct {
		Workload string  `json:"workload"`
		Slots    int     `json:"slots"`
		Seconds  float64 `json:"seconds"`
		Policies []pol   `json:"policies"`
	}
	var out []wl
	for _, rep := range reps {
		x := wl{Workload: rep.Workload, Slots: rep.Slots, Seconds: rep.Seconds}
		for _, r := range rep.results {
			x.Policies = append(x.Policies, pol{r.Policy, conv(r.Groups), conv(r.Classes)})
		}
		out = append(out, x)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
