package bench

// The mixed-urgency scenarios: a real server (imageproxy, OPA) serving
// interactive requests (its small ones, with a latency objective) at
// 50 %, 80 % and 2x of their own capacity while batch clients keep its
// large requests coming (a closed loop: throughput is what counts for
// them), behind one semaphore, a semaphore per kind (what zoekt ships),
// failsafe-go's prioritized adaptive limiter, go-concurrency-limits'
// partitioned Gradient2 and cpuwork's middleware with the batch
// endpoint as Batch.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cpuwork/cpuwork/cgroup"
)

// mixedPeers are the admitters of the mixed-urgency scenarios.
var mixedPeers = []struct{ name, desc string }{
	{"stock", "the server as it ships: every request runs at once"},
	{"sem", "one semaphore for both kinds: an x/sync semaphore of GOMAXPROCS workers and a queue of 2x that, 503 when full"},
	{"two-sem", "a semaphore per kind, as zoekt ships: interactive GOMAXPROCS workers and a queue of 2x, batch a quarter of GOMAXPROCS (at least 1) and a queue of 2x that"},
	{"failsafe-prio", "failsafe-go v0.9.8 adaptivelimiter with its queue, BuildPrioritized: interactive at priority High, batch at Low, calibrated every second"},
	{"gradient2-part", "go-concurrency-limits v0.8.0 Gradient2 behind its FIFO blocking limiter, partitioned by kind (its lookup partition strategy: interactive 80 %, batch 20 %)"},
	{"sem-deadline", "a semaphore whose waiters leave at the objective (in overload only): an x/sync semaphore of GOMAXPROCS workers, a request with no worker by its arrival plus the objective answers 503"},
}

// mixedLoads are the interactive load levels, fractions of the
// interactive requests' own capacity; mixedBatchClients the batch
// clients per slot.
var mixedLoads = []float64{0.5, 0.8, 2}

const mixedBatchClients = 2

// mixedControl is the mixed-urgency scenarios' A/A control: a semaphore
// per kind, the best peer of their checked-in runs in overload (the one
// semaphore answered no interactive request within the objective at 2x,
// and an A/A control that does no work gives no margin).
const mixedControl = "two-sem"

// mixedTarget is tg's mixed-urgency scenario.
func mixedTarget(tg realTarget) realTarget {
	base := tg.scenario
	tg.scenario = base + "-mixed"
	tg.peers, tg.control = mixedPeers, mixedControl
	tg.args = append(slices.Clone(tg.args), "-mixed")
	tg.cpuworkDesc = "the cpuworkhttp middleware with the objective for the interactive endpoint and Options.Class Batch (no objective) for the batch one, the executor with Options.Batch.Beside and GOMAXPROCS doubled (batch on slots of its own beside the budget's, on demoted threads; under a quota in a child cgroup capped to what the rest of the server leaves of it), served through WatchListener (20 added lines: realbench/admit); no Checkpoint: the server's work loops are in libraries it calls"
	name := strings.SplitN(tg.claim, " with ", 2)[0]
	tg.claim = fmt.Sprintf("%s serving interactive requests (%s) beside batch clients re-running its large ones (%s), with cpuwork's middleware and the batch endpoint as Batch: interactive p99 at 80 %% better than every peer's at equivalent batch throughput, interactive goodput at 2x better", name, tg.small, tg.large)
	tg.desc = fmt.Sprintf("%s: interactive requests at 50 %%, 80 %% and 2x of their own capacity beside %d batch clients per slot, unconstrained and in a 1.5-CPU cgroup: one semaphore, a semaphore per kind, failsafe-go's prioritizer, go-concurrency-limits' partitioned Gradient2, cpuwork's middleware with Options.Class", name, mixedBatchClients)
	return tg
}

// mixedDef is tg's mixed-urgency scenario, not in the default set.
func mixedDef(tg realTarget) scenarioDef {
	mt := mixedTarget(tg)
	return scenarioDef{name: mt.scenario, extra: true,
		desc:        fmt.Sprintf("%s (not in the default set: `cpuwork bench --scenario %s`)", mt.desc, mt.scenario),
		variants:    mt.names,
		steps:       func(r *Runner, vs []string) int { return 2*loadSteps(r, vs, mixedLoads) + 1 },
		run:         func(r *Runner) (*Scenario, error) { return r.mixedScenario(mt) },
		minDuration: 500 * time.Millisecond,
		budget:      360 * time.Second}
}

func (r *Runner) mixedScenario(tg realTarget) (*Scenario, error) {
	s := &Scenario{Name: tg.scenario, Baseline: "stock", Claim: tg.claim}
	rig, undo, err := r.setUpReal(s, tg)
	defer undo()
	if rig == nil {
		return s, err
	}
	// The interactive requests' objective: ten times their CPU.
	rig.slo = time.Duration(10 * rig.costs["small"] * float64(time.Second)).Round(10 * time.Millisecond)
	r.work.slo = rig.slo
	r.onlySmall = true
	defer func() { r.onlySmall = false }()
	loads := r.loadLevels(mixedLoads)
	var group *cgroup.Group
	plain := r.realVariantOnce(s, rig, &group)
	once := func(v *Variant, variant string, rate float64) error {
		if v.Name == "calibration" { // the interactive requests' own capacity: no batch
			return plain(v, variant, rate)
		}
		return r.withBatch(v, s.Name, rig, func() error { return plain(v, variant, rate) })
	}
	variants, control := tg.variants(), tg.controlName()
	estimate := float64(r.slots) / rig.costs["small"]
	r.search = true
	defer func() { r.search = false }()
	cals := r.atLoads(s, variants, loads, control, func() []check { return mixedChecks(tg, loads, "") },
		func(round int) calibration { return r.measureCapacity(s, "stock", round, estimate, plain) }, once)
	s.Notes = append(s.Notes, fmt.Sprintf("interactive = %s (%s of the server's CPU), its objective %s (10x its CPU); batch = %s (%s), %d closed-loop clients per slot; %s",
		tg.small, ms(rig.costs["small"]), ms(rig.slo.Seconds()), tg.large, ms(rig.costs["large"]), mixedBatchClients, capacityNote("stock", r.slots, cals)))
	r.checkLoads(s, "stock", mixedCheckedLoads(loads), cals)
	s.CapacityDrift = capacityDrift(cals)
	cs := mixedChecks(tg, loads, "")
	if cc, beside := r.besideCase(loads); beside {
		// Beside a nice-0 CPU-bound process in the server's cgroup, at
		// 80 %, as the other load scenarios: the demoted batch threads
		// are what it would starve.
		r.besideAt(s, variants, control, cc, estimate, once)
		cs = append(cs, mixedBesideChecks(tg, cc)...)
	}
	r.inQuotaCase(s, variants, func(g *cgroup.Group) { group = g }, func(qv []struct{ name, desc string }) {
		qcals := r.atLoads(s, qv, loads, control+quotaSuffix(), func() []check { return mixedChecks(tg, loads, quotaSuffix()) },
			func(round int) calibration {
				return r.measureCapacity(s, "stock"+quotaSuffix(), round, estimate*realserverQuota/float64(r.slots), plain)
			}, once)
		s.Notes = append(s.Notes, fmt.Sprintf("quota case: every server in a %.1f-CPU cgroup (%s); %s", realserverQuota, tg.quotaProcs(), capacityNote("stock"+quotaSuffix(), r.slots, qcals)))
		cs = append(cs, mixedChecks(tg, loads, quotaSuffix())...)
	})
	judgeChecks(s, cs)
	return s, nil
}

// mixedCheckedLoads are the levels of loads whose calibration checkLoads
// tests with stock: those above capacity only. The levels are fractions
// of the interactive requests' own capacity, measured without batch, and
// stock serves them beside the batch clients, which take CPU the
// capacity run did not share: below capacity it falls behind by design,
// and the test that it keeps up (>= 90 % of the offer at 80 %) would call
// every repeat's capacity overestimated.
func mixedCheckedLoads(loads []float64) []float64 {
	return slices.DeleteFunc(slices.Clone(loads), func(l float64) bool { return l < overloadAt })
}

// withBatch runs run (an interactive load run of v) while the batch
// clients send the server's large requests, closed loop, through the
// load generator; then it records the batch work done per second
// ("batch_cpu_per_s", at the large request's cost) and the longest time
// without a batch request completing ("batch_starved_s").
func (r *Runner) withBatch(v *Variant, scenario string, rig *realRig, run func() error) error {
	addr := make(chan string, 1)
	var start time.Time
	r.onServer = func(a string) { start = time.Now(); addr <- a }
	defer func() { r.onServer = nil }()
	type result struct {
		done []time.Time
		err  error
	}
	res := make(chan result, 1)
	go func() {
		a, ok := <-addr
		if !ok {
			res <- result{}
			return
		}
		done, err := batchLoad(r.cfg.LoadGen, a, r.loadDur, mixedBatchClients*r.slots)
		res <- result{done, err}
	}()
	err := run()
	close(addr)
	b := <-res
	if err != nil {
		return err
	}
	if b.err != nil {
		return fmt.Errorf("%s: batch clients: %w", scenario, b.err)
	}
	if len(v.Repeats) == 0 {
		return nil
	}
	d := r.loadDur
	var in []time.Time
	for _, t := range b.done {
		if !t.Before(start) && !t.After(start.Add(d)) {
			in = append(in, t)
		}
	}
	slices.SortFunc(in, func(a, b time.Time) int { return a.Compare(b) })
	longest, last := time.Duration(0), start
	for _, t := range append(in, start.Add(d)) {
		longest = max(longest, t.Sub(last))
		last = t
	}
	v.setRepeatExtra("batch_cpu_per_s", float64(len(in))*rig.costs["large"]/d.Seconds())
	v.setRepeatExtra("batch_starved_s", longest.Seconds())
	return nil
}

// batchLoad runs the load generator closed loop with clients clients,
// every request to /large, for d against addr; it returns when each
// request that was answered 200 completed.
func batchLoad(loadgen []string, addr string, d time.Duration, clients int) ([]time.Time, error) {
	args := append(append([]string{}, loadgen[1:]...), "--target", "http://"+addr, "--rate", "0",
		"--workers", strconv.Itoa(clients), "--only-large", "--duration", d.String())
	cmd := exec.Command(loadgen[0], args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	var done []time.Time
	dec := json.NewDecoder(bufio.NewReader(out))
	for {
		var lr LoadResult
		if err := dec.Decode(&lr); err != nil {
			if err != io.EOF {
				cmd.Process.Kill()
				cmd.Wait()
				return nil, err
			}
			break
		}
		if lr.Code == http.StatusOK {
			done = append(done, lr.Timestamp.Add(time.Duration(lr.LatencyNS)))
		}
	}
	return done, cmd.Wait()
}

// mixedBesideChecks: at besideLevel beside the competitor cc, cpuwork
// against the best peer on the interactive p99 of all requests and the
// batch work done, with the batch's longest starvation as a figure.
func mixedBesideChecks(tg realTarget, cc competition) []check {
	at := fmt.Sprintf("%s@%.0f%%", cc.suffix(), besideLevel*100)
	alts, aa := realPeersAt(tg, cc.suffix(), besideLevel)
	lvl := fmt.Sprintf("%.0f%% beside %s", besideLevel*100, cc.Name)
	return []check{
		{label: lvl + ": interactive p99 of all requests (a shed one counted as never answered)", judged: "cpuwork" + at, against: alts, metric: "p99_all_s", aa: aa},
		{label: lvl + ": batch work done, CPU-s per s", judged: "cpuwork" + at, against: alts, metric: "batch_cpu_per_s", higher: true, aa: aa},
		{label: lvl + ": batch's longest time without a completion", judged: "cpuwork" + at, metric: "batch_starved_s", limit: 1, unit: "s"},
	}
}

// mixedChecks: at each level (suf: "" unconstrained, quotaSuffix() in
// the quota cgroup), cpuwork against the best peer on the interactive
// p99 of all requests up to capacity and on the interactive goodput
// within the objective over it, and on the batch work done per second;
// the batch's longest starvation at 80 % as a figure (at most 1 s).
func mixedChecks(tg realTarget, loads []float64, suf string) []check {
	where := ""
	if suf != "" {
		where = fmt.Sprintf("%.1f-CPU cgroup, ", realserverQuota)
	}
	var cs []check
	for _, l := range loads {
		at := fmt.Sprintf("%s@%.0f%%", suf, l*100)
		alts, aa := realPeersAt(tg, suf, l)
		lvl := fmt.Sprintf("%s%.0f%%", where, l*100)
		if l <= 1 {
			cs = append(cs, check{label: lvl + ": interactive p99 of all requests (a shed one counted as never answered)", judged: "cpuwork" + at, against: alts, metric: "p99_all_s", aa: aa})
		} else {
			cs = append(cs, check{label: lvl + ": interactive goodput within the objective, CPU-s of work per s", judged: "cpuwork" + at, against: alts, metric: "goodput_cpu_per_s", higher: true, aa: aa})
		}
		cs = append(cs, check{label: lvl + ": batch work done, CPU-s per s", judged: "cpuwork" + at, against: alts, metric: "batch_cpu_per_s", higher: true, aa: aa})
		if l == 0.8 {
			cs = append(cs, check{label: lvl + ": batch's longest time without a completion", judged: "cpuwork" + at, metric: "batch_starved_s", limit: 1, unit: "s"})
		}
	}
	return cs
}
