package bench

// The load engine of the load scenarios (service, inference): the open-loop
// load generator and its results, the capacity measured before each round,
// the levels run as fractions of it, the A/A control, the level beside a
// competitor, and the checks every load scenario declares.

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cpuwork/cpuwork"
	"github.com/cpuwork/cpuwork/cgroup"
	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// thoroughLoads are both load scenarios' levels with --thorough.
var thoroughLoads = []float64{0.5, 0.8, 0.95, 2, 4}

// Request mix of the service scenario: 90 % small, 10 % large.
const smallShare = 0.9

// LoadResult is one request as the load generator saw it, sent from the
// loadgen process to the bench as a JSON line.
type LoadResult struct {
	Seq       uint64    `json:"seq"`
	Kind      string    `json:"kind"` // "small" or "large"
	Timestamp time.Time `json:"ts"`   // when vegeta sent it
	LatencyNS int64     `json:"lat_ns"`
	Code      uint16    `json:"code"`
	Error     string    `json:"err,omitempty"`
	Tenant    string    `json:"tenant,omitempty"` // "t0".."tN-1" with LoadSpec.Tenants
}

// LoadSpec is one run of the load generator (LoadGen).
type LoadSpec struct {
	// Base is the server's base URL (loopback); requests go to Base+"/small"
	// and Base+"/large".
	Base string
	// Rate is the open loop's requests/s (vegeta's constant pacer, a whole
	// number); 0 with Workers > 0 is a closed loop.
	Rate float64
	// Duration is how long the attack sends; positive.
	Duration time.Duration
	// SmallBody, LargeBody: a kind with a body is a POST of it, else a GET.
	SmallBody, LargeBody []byte
	// Workers is the closed loop's clients (Rate 0), each sending its next
	// request when the last one is answered.
	Workers int
	// OnlySmall sends every request to /small (the priority scenario's
	// critical requests); OnlyLarge every request to /large (the
	// mixed-urgency scenarios' batch clients).
	OnlySmall, OnlyLarge bool
	// Step, when its At is positive, sends Step.From requests/s until
	// Step.At and Rate after it (the step response).
	Step StepLoad
	// Timeout is how long a client waits for an answer before it gives up
	// and closes its connection (0: 30 s).
	Timeout time.Duration
	// MixSeed seeds the order of the small/large mix (mixTargeter).
	MixSeed uint64
	// Tenants, when positive, sends each request for one of that many
	// tenants ("?tenant=tK"): t0 with probability FloodShare, the others
	// evenly (tenantTargeter).
	Tenants    int
	FloodShare float64
}

// LoadGen is the hidden `cpuwork loadgen` subcommand: an open-loop vegeta
// attack (constant pacer) at s.Rate requests/s for s.Duration against
// s.Base, writing one LoadResult per line to w. It runs in its own process
// so that the generator never competes with the server for its Ps. With
// Rate 0 and Workers > 0 it is a closed loop instead (the capacity
// measurement: the generator's cost then follows what the server serves,
// not an offered rate above it). It returns an error for a spec out of
// range, or the first write error.
//
// The requests are smallShare small, the rest large, in blocks of a
// hundred whose order is drawn from a PCG seeded with s.MixSeed
// (mixTargeter): the same seed sends the same sequence of kinds (the
// variants of one pair see the same mix), and no fixed pattern lines the
// large requests up with a server's queue.
func LoadGen(w io.Writer, s LoadSpec) error {
	base, rate, d, workers, step, timeout := s.Base, s.Rate, s.Duration, s.Workers, s.Step, s.Timeout
	closed := rate == 0 && workers > 0
	if (rate <= 0 && !closed) || d <= 0 || workers < 0 {
		return fmt.Errorf("loadgen: rate %v (or 0 with workers > 0, not %d) and duration %v must be positive", rate, workers, d)
	}
	if rate != math.Trunc(rate) {
		return fmt.Errorf("loadgen: rate %v: vegeta's constant pacer sends whole requests per second", rate)
	}
	if step.At < 0 || step.At > 0 && (closed || step.At >= d || step.From < 1 || step.From != math.Trunc(step.From)) {
		return fmt.Errorf("loadgen: a step needs an open loop, a whole --from-rate of at least 1 (not %v) and --step-at inside the duration (not %v of %v)", step.From, step.At, d)
	}
	if timeout < 0 {
		return fmt.Errorf("loadgen: --timeout %v must not be negative", timeout)
	}
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	if s.Tenants < 0 || s.Tenants == 1 || s.FloodShare < 0 || s.FloodShare >= 1 {
		return fmt.Errorf("loadgen: --tenants %d (0, or 2 and more) and --flood-share %v (0 to 1) are out of range", s.Tenants, s.FloodShare)
	}
	var kinds [2]vegeta.Target // small, large
	for i, kind := range []string{"small", "large"} {
		t := vegeta.Target{Method: "GET", URL: base + "/" + kind}
		if body := [2][]byte{s.SmallBody, s.LargeBody}[i]; body != nil {
			t.Method, t.Body = "POST", body
		}
		kinds[i] = t
	}
	share := smallShare
	switch {
	case s.OnlySmall && s.OnlyLarge:
		return errors.New("loadgen: --only-small and --only-large exclude each other")
	case s.OnlySmall:
		share = 1
	case s.OnlyLarge:
		share = 0
	}
	opts := []func(*vegeta.Attacker){vegeta.Timeout(timeout), vegeta.KeepAlive(true), vegeta.Connections(10000), vegeta.MaxWorkers(10000)}
	var pacer vegeta.Pacer = &precisePacer{Pacer: vegeta.ConstantPacer{Freq: int(rate), Per: time.Second}}
	if step.At > 0 {
		pacer = &precisePacer{Pacer: stepPacer{from: int(step.From), to: int(rate), at: step.At}}
	}
	if closed {
		// vegeta's infinite rate (Freq 0) with a fixed number of workers.
		opts = append(opts, vegeta.Workers(uint64(workers)), vegeta.MaxWorkers(uint64(workers)))
		pacer = vegeta.ConstantPacer{}
	}
	atk := vegeta.NewAttacker(opts...)
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	targeter := mixTargeter(kinds, share, s.MixSeed)
	if s.Tenants > 0 {
		targeter = tenantTargeter(targeter, s.Tenants, s.FloodShare, s.MixSeed)
	}
	for res := range atk.Attack(targeter, pacer, d, "service") {
		url, tenant, _ := strings.Cut(res.URL, "?tenant=")
		kind := "small"
		if url == base+"/large" {
			kind = "large"
		}
		if err := enc.Encode(LoadResult{Seq: res.Seq, Kind: kind, Timestamp: res.Timestamp,
			LatencyNS: int64(res.Latency), Code: res.Code, Error: res.Error, Tenant: tenant}); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// mixBlock is the length of the generator's blocks: each block of this
// many requests holds the mix's exact share of large ones, at places
// drawn at random.
const mixBlock = 100

// mixTargeter returns a vegeta targeter that gives each request kinds[0]
// (small) or kinds[1] (large) in permuted blocks: every mixBlock requests
// hold round((1-share) × mixBlock) large ones at random places (a shuffle
// of the block from a PCG seeded with seed), in the order the attack's
// workers ask (they ask concurrently, hence the lock). A block's exact
// share keeps a run's work at the mix's share to within one block; within
// it the large requests fall almost as independent draws would (the gap
// to the next one is 1 for 9 in 99 of them), never at a fixed spacing
// (docs/bench.md, "Scenarios").
func mixTargeter(kinds [2]vegeta.Target, share float64, seed uint64) vegeta.Targeter {
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(seed, 0x6d6978)) // "mix"
	large := int(math.Round((1 - share) * mixBlock))
	var block [mixBlock]bool // true: large
	next := mixBlock
	return func(t *vegeta.Target) error {
		if t == nil {
			return vegeta.ErrNilTarget
		}
		mu.Lock()
		if next == mixBlock {
			for i := range block {
				block[i] = i < large
			}
			rng.Shuffle(mixBlock, func(i, j int) { block[i], block[j] = block[j], block[i] })
			next = 0
		}
		isLarge := block[next]
		next++
		mu.Unlock()
		*t = kinds[0]
		if isLarge {
			*t = kinds[1]
		}
		return nil
	}
}

// tenantTargeter gives each request of next a tenant, "?tenant=tK" on its
// URL: t0 (the flood) with probability flood, else one of t1..tn-1 at
// random, drawn from a PCG seeded with seed.
func tenantTargeter(next vegeta.Targeter, n int, flood float64, seed uint64) vegeta.Targeter {
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(seed, 0x74656e)) // "ten"
	return func(t *vegeta.Target) error {
		if err := next(t); err != nil {
			return err
		}
		mu.Lock()
		k := 0
		if rng.Float64() >= flood {
			k = 1 + rng.IntN(n-1)
		}
		mu.Unlock()
		t.URL += fmt.Sprintf("?tenant=t%d", k)
		return nil
	}
}

// The service scenario's second latency check (the team's rule: every
// latency claim alone and beside another CPU-bound process): the 95 %
// level again, beside one competitor, at 95 % of the capacity measured
// beside it.
var (
	besideCompetition = Competitions[1] // nice0: one CPU-bound process at nice 0 in the bench's cgroup
	besideLevel       = 0.8
)

// besideCase reports whether this run measures the service beside its
// competitor: when the run's competition cases include it (by default
// and with --quick; --compete chooses) and loads include besideLevel.
func (r *Runner) besideCase(loads []float64) (competition, bool) {
	return besideCompetition, slices.Contains(r.competitions(), besideCompetition) && slices.Contains(loads, besideLevel)
}

// besideAt runs a load scenario's variants at besideLevel beside the
// competitor cc: in each repeat the competitor starts, the capacity is
// measured again beside it (by calibrating, the best alternative, as
// alone), the variants run in a shuffled order under their base names,
// and the competitor stops (on every path). A variant whose competitor
// died during its run, or could not start, is invalid; a capacity that
// could not be measured beside it leaves that repeat not judged (its
// variants ran at fractions of an estimate), and the case's variants not
// measured (invalid) when fewer than two repeats (one of one) remain; the
// alone levels' verdict does not use these calibrations.
func (r *Runner) besideAt(s *Scenario, variants []struct{ name, desc string }, calibrating string, cc competition, estimate float64, once func(v *Variant, variant string, rate float64) error) {
	var vs []struct{ name, desc string }
	for _, v := range variants {
		vs = append(vs, struct{ name, desc string }{v.name + cc.suffix(), v.desc + "; " + cc.Desc})
	}
	var stop func()
	var alive func() bool
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	failed := ""
	beside := func(v *Variant, variant string, rate float64) error {
		if failed != "" {
			return errors.New(failed)
		}
		base, _ := baseName(variant)
		if err := once(v, base, rate); err != nil {
			return err
		}
		if !alive() {
			return cc.died()
		}
		return nil
	}
	calibrate := func(round int) calibration {
		if stop != nil {
			stop()
			stop = nil
		}
		var err error
		if stop, alive, err = cc.start(); err != nil {
			failed = fmt.Sprintf("not measured: case %s: %v", cc.Name, err)
			return calibration{capacity: estimate, failure: failed, note: failed}
		}
		failed = ""
		return r.measureCapacity(s, calibrating+cc.suffix(), round, estimate, beside)
	}
	control := ""
	if slices.ContainsFunc(variants, func(v struct{ name, desc string }) bool { return v.name == aaOf(s.Name) }) {
		control = aaOf(s.Name) + cc.suffix()
	}
	// No capacity search beside the competitor: the default run's time
	// holds the alone case's only.
	defer func(search bool) { r.search = search }(r.search)
	r.search = false
	cals := r.atLoads(s, vs, []float64{besideLevel}, control, nil, calibrate, beside)
	s.Notes = append(s.Notes, fmt.Sprintf("%s at %.0f%%, %s: %s", cc.Name, besideLevel*100, cc.Desc, capacityNote(calibrating+cc.suffix(), r.slots, cals)))
	lost := map[int]string{} // repeat index -> why its capacity beside cc is not known
	for i, cal := range cals {
		if cal.failure != "" {
			lost[i] = fmt.Sprintf("the capacity beside %s was not measured before repeat %d: %s", cc.Name, i+1, cal.note)
		}
	}
	if len(lost) == 0 {
		return
	}
	if len(cals)-len(lost) < min(2, len(cals)) {
		for _, v := range s.Variants {
			if caseOf(v.Name) == cc.suffix() && v.Valid {
				v.Valid, v.Invalid = false, "not measured: "+lost[slices.Min(slices.Collect(maps.Keys(lost)))]
			}
		}
		return
	}
	leaveOut(s, cc.suffix(), lost)
}

// leaveOut marks the repeats in bad (index -> reason) not judged on every
// load-level variant of the case named by its suffix ("" alone; caseOf),
// with a note each: another case has a calibration of its own.
func leaveOut(s *Scenario, suffix string, bad map[int]string) {
	idx := slices.Sorted(maps.Keys(bad))
	for _, v := range s.Variants {
		if caseOf(v.Name) != suffix {
			continue
		}
		for _, i := range idx {
			if i < len(v.Repeats) && v.Repeats[i].Extra["capacity_per_s"] > 0 {
				v.Repeats[i].NotJudged = bad[i]
			}
		}
	}
	for _, i := range idx {
		s.Notes = append(s.Notes, fmt.Sprintf("repeat %d is not judged: %s", i+1, bad[i]))
	}
}

// loadChecks are a load scenario's checks at each of loads: cpuwork
// against the best of naive and control on the p99 (metric) up to
// capacity and on the p99 of served and the goodput over it; the share
// refused (refused, named what) and, over capacity, the p99 against
// cpuwork's own at 80 % as figures; and the same at besideLevel beside
// besideCompetition. control's A/A control gives every margin.
func loadChecks(loads []float64, control, metric, refused, what string, overloadAlts ...string) []check {
	var cs []check
	add := func(where, suf string, l float64) {
		at := fmt.Sprintf("%s@%.0f%%", suf, l*100)
		aa := [2]string{control + at, control + suf + aaSuffix + fmt.Sprintf("@%.0f%%", l*100)}
		if suf == "" {
			aa[1] = control + aaSuffix + at
		}
		alts := []string{"naive" + at, control + at}
		if l > 1 {
			for _, a := range overloadAlts { // the strongest a user deploys in overload
				alts = append(alts, a+at)
			}
		}
		if l <= 1 {
			label := "p99 of served"
			if metric == "p99_all_s" {
				label = "p99 of all requests (a shed one counted as never answered)"
			}
			cs = append(cs,
				check{label: where + ": " + label, judged: "cpuwork" + at, against: alts, metric: metric, aa: aa},
				check{label: where + ": " + what, judged: "cpuwork" + at, metric: refused, limit: 0.01, unit: "%"})
			return
		}
		cs = append(cs,
			check{label: where + ": p99 of served", judged: "cpuwork" + at, against: alts, metric: "p99", aa: aa},
			check{label: where + ": goodput within the objective, CPU-s of work per s", judged: "cpuwork" + at, against: alts, metric: "goodput_cpu_per_s", higher: true, aa: aa})
		if slices.Contains(loads, 0.8) {
			cs = append(cs, check{label: where + ": p99 of served vs its own at 80%", judged: "cpuwork" + at, against: []string{"cpuwork@80%"}, metric: "p99", limit: 2.0, goal: true})
		}
		cs = append(cs,
			check{label: where + ": work within the objective, share of the slots", judged: "cpuwork" + at, metric: "goodput_cpu_share", higher: true, limit: 0.9, unit: "%"},
			check{label: where + ": served after the objective", judged: "cpuwork" + at, metric: "served_late_share", limit: 0.01, unit: "%"},
			check{label: where + ": completed past their due inside the executor (ClassStats.EndedLate)", judged: "cpuwork" + at, metric: "ended_late_share", limit: 0.01, unit: "%"})
	}
	for _, l := range loads {
		add(fmt.Sprintf("%.0f%%", l*100), "", l)
	}
	if slices.Contains(loads, besideLevel) {
		add(fmt.Sprintf("%.0f%% beside %s", besideLevel*100, besideCompetition.Name), besideCompetition.suffix(), besideLevel)
	}
	return cs
}

// capacitySteps is the number of capacity runs the progress counts per
// repeat: one closed-loop run and the open-loop steps down from it (three
// expected, and the halfway step; the descent stops at the first rate
// kept up with, and the progress total grows when it takes more).
const capacitySteps = 1 + 4

// calibration is a scenario's capacity: the highest open-loop rate (the
// load levels' arrival process) its best alternative keeps up with, and
// the share of the slots' CPU it used there.
type calibration struct {
	capacity float64
	cpuShare float64 // process CPU / (duration × slots) at the capacity
	// failure, when the capacity runs failed (capacity is then the
	// estimate), says so for the scenario's verdict (checkLoads makes it
	// s.Calibration: nothing is judged on those levels).
	failure string
	note    string
}

// keptUpRate is the rate at which a run of duration d answered its offer,
// for the capacity descent's keep-up test (requests/s): the inWindow
// requests answered within the run, with their mean latency meanLat, over
// d - meanLat. A server that keeps up with rate λ answers by the end of
// the run what was sent until about meanLat before it, λ(d - meanLat)
// requests (Little's law: λ·meanLat are in flight at the end), so this is
// λ whatever its latency; an overloaded one answers at its capacity μ,
// and its backlog raises meanLat by only half the last request's wait, so
// the rate stays below the offer. Answers per second of the whole run
// (goodput_per_s) count the requests in flight at the end as not kept up
// with: at 14/s and a 75 ms mean, 2 s runs leave one of 28 in flight, and
// a 97 % test then failed at every rate a server kept up with
// (TestKeptUpRateCountsNoRequestInFlightAsLost). meanLat is capped at
// d/2.
func keptUpRate(inWindow int, meanLat, d time.Duration) float64 {
	return float64(inWindow) / (d - min(max(meanLat, 0), d/2)).Seconds()
}

// capacityFactors are the fractions of the closed-loop throughput the
// open-loop descent offers, in order; keepsUp is the share of an offer
// that counts as kept up with, by its keptUpRate (a queue that grows
// during the run is not kept up with).
var capacityFactors = []float64{1.0, 0.95, 0.9, 0.85, 0.8, 0.75, 0.7}

const keepsUp = 0.97

// capacityProbe is one open-loop step of the descent.
type capacityProbe struct {
	rate, served, cpuShare float64
}

// descendToCapacity offers factor x start for each of capacityFactors in
// turn, open loop, until a step is served at >= keepsUp of its offer;
// when a step above it was not, it then offers the rate halfway between
// the two, and returns the higher of the two kept up with, with every
// step tried. The halfway step halves the descent's bias: the first step
// kept up with lies 0-5 % of the start below the rate the server keeps
// up with, 2.5 % on average, and a capacity taken low makes "110 %" an
// offer the server keeps up with (the level check then leaves the repeat
// not judged: docs/bench.md, "Load levels and capacity"). ok is false when none kept
// up or a step failed (err).
func descendToCapacity(start float64, try func(rate float64) (served, cpuShare float64, err error)) (at capacityProbe, tried []capacityProbe, ok bool, err error) {
	probe := func(rate float64) (capacityProbe, error) {
		served, share, err := try(rate)
		if err != nil {
			return capacityProbe{}, err
		}
		p := capacityProbe{rate: rate, served: served / rate, cpuShare: share}
		tried = append(tried, p)
		return p, nil
	}
	for _, f := range capacityFactors {
		rate := wholeRate(f * start)
		if n := len(tried); n > 0 && tried[n-1].rate == rate {
			continue
		}
		p, err := probe(rate)
		if err != nil {
			return capacityProbe{}, tried, false, err
		}
		if p.served < keepsUp {
			continue
		}
		if n := len(tried); n >= 2 {
			if mid := wholeRate((p.rate + tried[n-2].rate) / 2); mid > p.rate && mid < tried[n-2].rate {
				q, err := probe(mid)
				if err != nil {
					return capacityProbe{}, tried, false, err
				}
				if q.served >= keepsUp {
					return q, tried, true, nil
				}
			}
		}
		return p, tried, true, nil
	}
	return capacityProbe{}, tried, false, nil
}

// measureCapacity finds what variant (the best alternative) can take
// under the load levels' own arrival process. A closed loop (4 clients per
// slot, the run's duration) gives an upper bound: its CPU per request is
// the lowest there is (no idle Ps spinning, no thread wake-ups, 8
// keep-alive connections), so open loop the same server keeps up with up
// to ~20 % less (0-20 % in the repeats of docs/raw/bench-full-seed211.txt
// and docs/raw/bench-inference-seed231.txt; a pool that served 473-527/s
// closed loop served
// 78 % of 500/s and 98 % of 450/s open loop;
// docs/raw/capacity-open-loop-2026-11-24.txt). From it the rate steps down
// (capacityFactors) open loop until variant keeps up with >= 97 % of the
// offer (keptUpRate); that rate is the capacity, and load levels are fractions
// of it, so "95 %" is below what the best alternative keeps up with and
// "110 %" above. It runs before each repeat (atLoads). A failed
// measurement returns the estimate (or the closed-loop rate, when only the
// descent failed), said to be one, with its failure, which checkLoads makes
// the scenario's calibration verdict (nothing is judged on its levels).
func (r *Runner) measureCapacity(s *Scenario, variant string, round int, estimate float64, once func(v *Variant, variant string, rate float64) error) calibration {
	failed := func(reason string, fallback float64) calibration {
		return calibration{capacity: fallback,
			failure: fmt.Sprintf("the capacity runs of %s failed (%s); load levels are fractions of %.0f/s", variant, reason, fallback),
			note:    fmt.Sprintf("ESTIMATED %.0f/s (not measured: %s)", fallback, reason)}
	}
	r.step(fmt.Sprintf("%s: measuring capacity (%s, closed loop, %d clients, before repeat %d)", s.Name, variant, 4*r.slots, round+1))
	closed := &Variant{Name: "calibration", Valid: true}
	if err := once(closed, variant, 0); err != nil {
		return failed(err.Error(), estimate)
	}
	upper := closed.Repeats[0].Extra["goodput_per_s"]
	if upper <= 0 {
		return failed("served nothing closed loop", estimate)
	}
	at, tried, ok, err := descendToCapacity(upper, func(rate float64) (float64, float64, error) {
		r.step(fmt.Sprintf("%s: measuring capacity (%s, open loop at %.0f/s, before repeat %d)", s.Name, variant, rate, round+1))
		v := &Variant{Name: "calibration", Valid: true}
		if err := once(v, variant, rate); err != nil {
			return 0, 0, err
		}
		rp := v.Repeats[0]
		return rp.Extra["kept_up_per_s"], rp.Extra["cpu_share_of_slots"], nil
	})
	var steps []string
	for _, p := range tried {
		steps = append(steps, fmt.Sprintf("%.0f/s: %.0f%%", p.rate, 100*p.served))
	}
	switch {
	case err != nil:
		return failed(err.Error(), upper)
	case !ok:
		return failed(fmt.Sprintf("it kept up with none of the open-loop rates (kept up with: %s)", strings.Join(steps, ", ")), upper)
	}
	return calibration{capacity: at.rate, cpuShare: at.cpuShare,
		note: fmt.Sprintf("%.0f/s (closed loop %.0f/s; open loop %s; %.0f%% of the slots' CPU)", at.rate, upper, strings.Join(steps, ", "), 100*at.cpuShare)}
}

// capacityNote describes the rounds' calibrations of variant.
func capacityNote(variant string, slots int, cals []calibration) string {
	var per []string
	for i, c := range cals {
		per = append(per, fmt.Sprintf("repeat %d %s", i+1, c.note))
	}
	drift := ""
	if d := capacityDrift(cals); d > 0 {
		drift = fmt.Sprintf("; drift over the repeats (max - min over the median): %.0f%%", 100*d)
	}
	return fmt.Sprintf("capacity measured before each repeat: the highest open-loop rate at which %s kept up with >= %.0f%% of the offer (answers within the run over its duration less their mean latency), stepping down from its closed-loop throughput (%d clients): %s; load levels are fractions of their repeat's capacity%s",
		variant, 100*keepsUp, 4*slots, strings.Join(per, "; "), drift)
}

// medianCapacity is the median of the rounds' capacities.
func medianCapacity(cals []calibration) float64 {
	var c []float64
	for _, cal := range cals {
		c = append(c, cal.capacity)
	}
	return median(c)
}

// overloadAt is the lowest load level checkLoads expects to be an
// overload (1.1: 110 % of capacity).
const overloadAt = 1.1

// checkLoads checks that the load levels are what they say, on the
// calibrating variant (the best alternative that measured the capacity),
// by what it served in each repeat, against that repeat's capacity: below
// capacity (<= 80 %) it keeps up, serving at least 90 % of what was
// offered within the run (a queue is drained after it, so not 100 %);
// above (>= 110 %) it does not, serving under 97 % of the offer or
// shedding. A capacity half the real one (no overload at "150 %") or twice
// it (every level an overload) fails it. A repeat that fails it, or
// whose capacity run failed (its levels are fractions of an estimate), is
// not judged (Repeat.NotJudged on every load-level variant of variant's
// case: its levels are not what they say, by this machine's drift within
// a repeat; another case has a calibration of its own); the
// scenario is judged on the others while at least two remain (one of
// one), else it is not judged at all (s.Calibration). The CPU share of
// each level is reported, not judged: a Go server spends more CPU per
// request at light load (idle Ps spin for work, every request wakes a
// thread) than in the closed loop, so it is not the load's share.
func (r *Runner) checkLoads(s *Scenario, variant string, loads []float64, cals []calibration) {
	var shares []string
	bad := map[int]string{} // repeat index -> why its levels are not what they say
	for i, cal := range cals {
		if cal.failure != "" {
			bad[i] = fmt.Sprintf("before repeat %d %s", i+1, cal.failure)
		}
	}
	for _, l := range loads {
		v := s.variant(fmt.Sprintf("%s@%.0f%%", variant, l*100))
		if v == nil || !v.Valid {
			continue
		}
		shares = append(shares, fmt.Sprintf("%.0f%%: %.0f%%", l*100, 100*median(v.repeatExtras("cpu_share_of_slots"))))
		for i, rp := range v.Repeats {
			c := rp.Extra["capacity_per_s"]
			if c <= 0 || bad[i] != "" {
				continue
			}
			served := rp.Extra["goodput_per_s"] / (l * c) // of the offer
			shed := rp.Extra["shed_share"]
			switch {
			case l <= 0.8 && served < 0.9:
				bad[i] = fmt.Sprintf("at %.0f%% %s served %.0f%% of the offer in repeat %d (expected >= 90%%): the capacity is overestimated, the level is an overload", l*100, variant, served*100, i+1)
			case l >= overloadAt && served >= 0.97 && shed <= 0.01:
				bad[i] = fmt.Sprintf("at %.0f%% %s served %.0f%% of the offer and shed %.1f%% in repeat %d (expected an overload: under 97%% served, or shedding): the capacity is underestimated", l*100, variant, served*100, shed*100, i+1)
			}
		}
	}
	s.Notes = append(s.Notes, fmt.Sprintf("%s's CPU per load level, share of the slots (median of the repeats; reported, not judged): %s", variant, strings.Join(shares, ", ")))
	if len(bad) == 0 {
		return
	}
	idx := slices.Sorted(maps.Keys(bad))
	var reasons []string
	for _, i := range idx {
		reasons = append(reasons, bad[i])
	}
	if left := len(cals) - len(bad); left < min(2, len(cals)) {
		s.Calibration = strings.Join(reasons, "; ")
		return
	}
	leaveOut(s, caseOf(variant), bad)
}

// closedLoop is the generator's extra flags for rate 0 (a closed loop of 4
// clients per slot), none otherwise.
func closedLoop(rate float64, slots int) []string {
	if rate != 0 {
		return nil
	}
	return []string{"--workers", strconv.Itoa(4 * slots)}
}

// loadOnce serves h on a loopback port and runs the load generator
// against it; watch wraps the listener with cpuwork.WatchListener (the
// cpuwork variants whose tasks call Checkpoint).
func (r *Runner) loadOnce(v *Variant, scenario string, h http.Handler, watch bool, rate float64, loadgen []string, extra ...string) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("%s: listen on loopback: %w", scenario, err)
	}
	if watch {
		ln = cpuwork.WatchListener(ln)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	return r.loadAt(v, scenario, ln.Addr().String(), rate, loadgen, extra...)
}

// loadAt is loadOnce against a server already listening at addr (in this
// process or another); the CPU it reports is this process's.
//
// rate 0 runs the generator closed-loop (extra then carries --workers N):
// latency counts from each request's send time and nothing is offered.
func (r *Runner) loadAt(v *Variant, scenario, addr string, rate float64, loadgen []string, extra ...string) error {
	closed := rate == 0
	if !closed {
		rate = wholeRate(rate) // what the pacer sends is what is offered
	}
	step := r.stepLoad
	if step.At > 0 {
		step.From = wholeRate(step.From)
	}
	m := startMeter()
	results, genCPU, err := r.runLoadGen(scenario, loadgen, r.loadArgs(addr, rate, step, loadgen, extra))
	if err != nil {
		return err
	}
	u := m.stop()
	if len(results) == 0 {
		return fmt.Errorf("%s: load generator returned no results", scenario)
	}
	t := r.tallyLoad(results, rate, step, closed)
	r.recordLoad(v, &t, u, genCPU, rate, step)
	return nil
}

// loadArgs are the load generator's arguments for a run at rate (0:
// closed loop) against addr, stepping as step says.
func (r *Runner) loadArgs(addr string, rate float64, step StepLoad, loadgen, extra []string) []string {
	args := append(append([]string{}, loadgen[1:]...), "--target", "http://"+addr,
		"--rate", strconv.FormatFloat(rate, 'f', 3, 64), "--duration", r.loadDur.String())
	if step.At > 0 {
		args = append(args, "--from-rate", strconv.FormatFloat(step.From, 'f', 0, 64), "--step-at", step.At.String())
	}
	if r.clientTimeout > 0 {
		args = append(args, "--timeout", r.clientTimeout.String())
	}
	args = append(args, "--mix-seed", strconv.FormatUint(r.mixSeed, 10))
	if r.onlySmall {
		args = append(args, "--only-small")
	}
	if r.tenants.n > 0 {
		args = append(args, "--tenants", strconv.Itoa(r.tenants.n), "--flood-share", strconv.FormatFloat(r.tenants.flood, 'f', 4, 64))
	}
	return append(args, extra...)
}

// runLoadGen runs the load generator loadgen[0] with args to its end and
// returns the results it printed and its own CPU time, s (wait4's rusage:
// it and the children it waited for, which it takes from the same CPUs
// as the server here).
func (r *Runner) runLoadGen(scenario string, loadgen, args []string) ([]LoadResult, float64, error) {
	cmd := exec.Command(loadgen[0], args...)
	cmd.Stderr = os.Stderr
	if r.loadgenGroup != nil {
		// The generator in a cgroup of its own with a fixed weight: the
		// same CPU conditions for every variant, whatever the server does.
		defer pinForChildren()() // until this returns, after the generator is reaped
		c, done, err := inGroup(loadgen[0], r.loadgenGroup, args...)
		if err != nil {
			return nil, 0, err
		}
		defer done()
		cmd = c
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, 0, err
	}
	if err := cmd.Start(); err != nil {
		return nil, 0, fmt.Errorf("%s: start load generator: %w", scenario, err)
	}
	var results []LoadResult
	dec := json.NewDecoder(out)
	for {
		var lr LoadResult
		if err := dec.Decode(&lr); err != nil {
			if err != io.EOF {
				cmd.Process.Kill()
				cmd.Wait()
				return nil, 0, fmt.Errorf("%s: read load results: %w", scenario, err)
			}
			break
		}
		results = append(results, lr)
	}
	if err := cmd.Wait(); err != nil {
		return nil, 0, fmt.Errorf("%s: load generator: %w", scenario, err)
	}
	var genCPU float64
	if ps := cmd.ProcessState; ps != nil {
		genCPU = (ps.UserTime() + ps.SystemTime()).Seconds()
	}
	return results, genCPU, nil
}

// loadTally is what one run's results came to, latency counted from each
// request's intended send time.
type loadTally struct {
	sent                                 int // requests the generator sent
	rec                                  *recorder
	all                                  *histT            // the served requests' latency
	kinds                                map[string]*histT // the same by request kind
	late                                 *histT            // the generator's own lateness: actual send time - intended
	shed, errs, ok, gaveUp               int
	inWindow                             int           // served within the run
	windowLat                            time.Duration // their summed latency
	work                                 float64       // CPU-s of the requests served within the objective and the run
	lateServed, withinObj                int           // served after the objective; within it, in the run or after
	afterStep                            []stepServed  // the requests that arrived after the step
	stepWork                             float64       // CPU-s of them served within the objective and the run
	stepServedLat                        []float64     // their served latencies, s
	fair                                 *histT        // the well-behaved tenants' served latency (all but t0, the flood)
	fairSent, fairUnanswered, fairWithin int
	floodSent, floodServed               int
}

// tallyLoad counts results of a run at rate (closed: a closed loop)
// stepping as step says.
func (r *Runner) tallyLoad(results []LoadResult, rate float64, step StepLoad, closed bool) loadTally {
	d := r.loadDur
	// Intended send time of hit Seq under vegeta's constant pacer is
	// began + (Seq+1)*interval; began is estimated from the least-delayed hit.
	var interval time.Duration
	if !closed {
		interval = time.Duration(float64(time.Second) / float64(int(rate)))
	}
	sendAt := func(seq uint64) time.Duration { return time.Duration(seq+1) * interval }
	if step.At > 0 {
		sendAt = stepPacer{from: int(step.From), to: int(rate), at: step.At}.sendAt
	}
	began := results[0].Timestamp
	for _, lr := range results {
		if t := lr.Timestamp.Add(-sendAt(lr.Seq)); t.Before(began) {
			began = t
		}
	}
	t := loadTally{sent: len(results), rec: newRecorder(began, len(results)), late: newHist(), fair: newHist(),
		kinds: map[string]*histT{"small": newHist(), "large": newHist()}}
	t.all = t.rec.shard()
	slo := r.work.slo
	for _, lr := range results {
		intended := began.Add(sendAt(lr.Seq))
		if closed {
			intended = lr.Timestamp
		}
		t.late.RecordValue(max(int64(lr.Timestamp.Sub(intended)/time.Microsecond), 1))
		end := lr.Timestamp.Add(time.Duration(lr.LatencyNS))
		lat := end.Sub(intended)
		switch {
		case lr.Tenant == "t0":
			t.floodSent++
			if lr.Code == http.StatusOK {
				t.floodServed++
			}
		case lr.Tenant != "":
			t.fairSent++
			if lr.Code == http.StatusOK {
				t.fair.RecordValue(max(int64(lat/time.Microsecond), 1))
				if slo == 0 || lat <= slo {
					t.fairWithin++
				}
			} else {
				t.fairUnanswered++
			}
		}
		if a := intended.Sub(began.Add(step.At)); step.At > 0 && a >= 0 {
			t.afterStep = append(t.afterStep, stepServed{after: a, latency: lat, shed: lr.Code == http.StatusServiceUnavailable})
			if lr.Code == http.StatusOK {
				t.stepServedLat = append(t.stepServedLat, lat.Seconds())
				if !end.After(began.Add(d)) && (slo == 0 || lat <= slo) {
					t.stepWork += r.work.cost[lr.Kind]
				}
			}
		}
		switch {
		case lr.Code == http.StatusServiceUnavailable:
			t.shed++
			continue // shed requests are counted, never in the latency percentiles
		case lr.Code == 0 && r.clientTimeout > 0 && strings.Contains(lr.Error, "Client.Timeout"):
			t.gaveUp++ // no answer before the client's deadline: it gave up, as set
			continue
		case lr.Code != http.StatusOK:
			t.errs++
			continue
		}
		t.ok++
		if slo > 0 && lat > slo {
			t.lateServed++
		} else {
			t.withinObj++
		}
		if !end.After(began.Add(d)) {
			t.inWindow++
			t.windowLat += lat
			if slo == 0 || lat <= slo {
				t.work += r.work.cost[lr.Kind]
			}
		}
		t.rec.record(t.all, end, lat)
		t.kinds[lr.Kind].RecordValue(max(int64(lat/time.Microsecond), 1))
	}
	return t
}

// recordLoad records t, a run at rate stepping as step says, in v: the
// run's latency and usage u, this repeat's figures and the variant's
// running means (genCPU: the generator's CPU time, s).
func (r *Runner) recordLoad(v *Variant, t *loadTally, u usage, genCPU, rate float64, step StepLoad) {
	d := r.loadDur
	h := t.rec.merged()
	v.addRun(h, t.rec.series, u)
	if step.At > 0 {
		after := d - step.At
		rec, ok, cv := stepResponse(t.afterStep, r.work.slo, after)
		v.setRepeatExtra("recovery_s", rec.Seconds())
		v.setRepeatExtra("recovered", map[bool]float64{true: 1}[ok])
		v.setRepeatExtra("shed_cv", cv)
		if lat := t.stepServedLat; len(lat) > 0 {
			slices.Sort(lat)
			v.setRepeatExtra("p99_after_step_s", lat[min(len(lat)-1, int(0.99*float64(len(lat))))])
		}
		v.setRepeatExtra("goodput_after_step_cpu_per_s", t.stepWork/after.Seconds())
	}
	sent := float64(t.sent)
	v.setRepeatExtra("shed_share", float64(t.shed)/sent)
	v.setRepeatExtra("gave_up_share", float64(t.gaveUp)/sent)
	unanswered := float64(t.shed+t.errs+t.gaveUp) / sent
	v.setRepeatExtra("unanswered_share", unanswered)
	if p, ok := p99OfAll(h, unanswered); ok {
		v.setRepeatExtra("p99_all_s", p)
	} // else nothing was answered: no p99 to judge, and the unanswered share fails the repeat
	v.setRepeatExtra("served", float64(t.ok))
	if t.fairSent > 0 {
		un := float64(t.fairUnanswered) / float64(t.fairSent)
		v.setRepeatExtra("tenants_unanswered_share", un)
		v.setRepeatExtra("tenants_within_objective_share", float64(t.fairWithin)/float64(t.fairSent))
		if p, ok := p99OfAll(t.fair, un); ok {
			v.setRepeatExtra("tenants_p99_all_s", p)
		}
		v.setRepeatExtra("flood_served_share", float64(t.floodServed)/float64(max(t.floodSent, 1)))
	}
	if r.work.slo > 0 {
		// The share of every request sent that was answered within the
		// objective: >= 99 % is the p99 of all requests within it (the
		// capacity search's test).
		v.setRepeatExtra("within_objective_share", float64(t.withinObj)/sent)
	}
	v.setRepeatExtra("generator_lateness_p99_s", latencyOf(t.late).P99)
	v.setRepeatExtra("generator_cpu_s", genCPU)
	// Goodput counts the requests served within the run: a queue left at
	// its end and drained afterwards is not throughput.
	v.setRepeatExtra("goodput_per_s", float64(t.inWindow)/d.Seconds())
	if t.inWindow > 0 {
		v.setRepeatExtra("kept_up_per_s", keptUpRate(t.inWindow, t.windowLat/time.Duration(t.inWindow), d))
	}
	if r.work.cost != nil {
		// Goodput as work: the CPU-seconds (on one core, as calibrated) of
		// the requests served within the objective and the run, per
		// second. A request weighs its cost, so shedding the large
		// requests is not goodput.
		v.setRepeatExtra("goodput_cpu_per_s", t.work/d.Seconds())
		v.setRepeatExtra("goodput_cpu_share", t.work/d.Seconds()/float64(r.slots))
		v.setRepeatExtra("served_late_share", float64(t.lateServed)/float64(max(t.ok, 1)))
	}
	// The process's CPU over the run's duration: the work happens within
	// it (open loop below capacity, or closed loop), while the meter's
	// wall time adds the generator's start and exit.
	v.setRepeatExtra("cpu_share_of_slots", u.cpu/(d.Seconds()*float64(r.slots)))
	r.recordLoadMeans(v, t, rate, step)
}

// recordLoadMeans folds t, a run at rate stepping as step says, into v's
// means over its repeats: offered and achieved rates, goodput, the kinds'
// latency, shed and errors.
func (r *Runner) recordLoadMeans(v *Variant, t *loadTally, rate float64, step StepLoad) {
	d := r.loadDur
	n := len(v.Repeats)
	offered := rate
	if step.At > 0 { // the mean of the two phases
		offered = (step.From*step.At.Seconds() + rate*(d-step.At).Seconds()) / d.Seconds()
	}
	v.OfferedPS = runMean(v.OfferedPS, offered, n)
	v.AchievedPS = runMean(v.AchievedPS, float64(t.sent)/d.Seconds(), n) // sent by the generator
	v.setExtra("goodput_per_s", runMean(v.Extra["goodput_per_s"], float64(t.inWindow)/d.Seconds(), n))
	v.setExtra("sent", v.Extra["sent"]+float64(t.sent))
	v.Throughput = v.Extra["goodput_per_s"]
	for k, h := range t.kinds {
		l := latencyOf(h)
		v.setRepeatExtra(k+"_p99_s", l.P99)
		if v.kinds == nil {
			v.kinds = map[string]*histT{}
		}
		if v.kinds[k] == nil {
			v.kinds[k] = newHist()
		}
		v.kinds[k].Merge(h)
		l = latencyOf(v.kinds[k]) // over every repeat so far
		v.setExtra(k+"_p50_s", l.P50)
		v.setExtra(k+"_p99_s", median(v.repeatExtras(k+"_p99_s")))
		v.setExtra(k+"_p999_s", l.P999)
	}
	v.setExtra("shed", v.Extra["shed"]+float64(t.shed))
	v.setExtra("errors", v.Extra["errors"]+float64(t.errs))
}

// p99OfAll is the p99 of every request sent, an unanswered one (shed or
// failed: a share unanswered of them) counted as never answered: the
// answered requests' quantile 0.99/(1-unanswered), so shedding the slowest
// requests does not lower it. With more than 1 % unanswered the p99 is
// beyond every answer; it is then the slowest answer's latency (a lower
// bound: a comparison on it keeps only the verdict the bound supports,
// unansweredBounds), and the checks that use it fail that repeat on the
// unanswered share (answeredCheck). Seconds; false when nothing was answered (a
// check on it is then not judged rather than fed a p99 of 0).
func p99OfAll(h *histT, unanswered float64) (float64, bool) {
	if h.TotalCount() == 0 || unanswered >= 1 {
		return 0, false
	}
	if q := 0.99 / (1 - unanswered); q < 1 {
		return float64(h.ValueAtQuantile(100*q)) / 1e6, true
	}
	return float64(h.Max()) / 1e6, true
}

// wholeRate is the request rate the load generator can pace: whole
// requests per second, at least 1.
func wholeRate(rate float64) float64 { return max(math.Floor(rate), 1) }

// atLoads runs every variant at every load level (a fraction of
// capacity), r.rounds times, load levels and variants in a shuffled order
// per round, as variants named "variant@N%". Before each round calibrate
// measures the capacity afresh (this machine's speed drifts by ~10 % over
// minutes: one capacity measured at the start made "110 %" of a later
// round no overload and "95 %" of another one), and that round's levels
// are fractions of it; each repeat records its capacity
// ("capacity_per_s"). Then it derives each variant's goodput (of the
// offered rate, and per repeat of its capacity) and shed share and marks
// it invalid when its responses had errors or the generator sent less
// than 99 % of the offered rate. It returns the rounds' calibrations.
//
// control, when not empty and run, also runs again at every level under
// the name control+"-aa", in the same shuffled order: the A/A control
// (the same server twice in one round), whose ratio to the first run is
// the comparisons' equivalence margin. checks, when not nil, decides the
// number of rounds (Runner.pairs); nil runs as many as s.Pairs (a second
// set of levels of a scenario already paired).
func (r *Runner) atLoads(s *Scenario, variants []struct{ name, desc string }, loads []float64, control string, checks func() []check, calibrate func(round int) calibration, once func(v *Variant, variant string, rate float64) error) []calibration {
	variants = slices.DeleteFunc(slices.Clone(variants), func(v struct{ name, desc string }) bool { return !r.wants(v.name) || !r.runs(v.name) })
	// runsAt: an overload alternative that is not the control runs only
	// above capacity, the only levels its checks compare with it.
	runsAt := func(name string, l float64) bool {
		base, _ := baseName(strings.TrimSuffix(name, aaSuffix))
		return l > 1 || !overloadOnly[base] || strings.HasPrefix(control, base)
	}
	if control != "" && slices.ContainsFunc(variants, func(v struct{ name, desc string }) bool { return v.name == control }) {
		variants = append(variants, struct{ name, desc string }{control + aaSuffix, aaDesc(control)})
	}
	for _, pv := range variants {
		for _, l := range loads {
			if runsAt(pv.name, l) {
				s.Variants = append(s.Variants, &Variant{Name: fmt.Sprintf("%s@%.0f%%", pv.name, l*100), Description: pv.desc, Valid: true})
			}
		}
	}
	var cals []calibration
	search := r.search && slices.Contains(loads, searchSteps[0])
	round := func(round int) {
		r.mixSeed = mixSeedOf(r.cfg.Seed, s.Name, round)
		cal := calibrate(round)
		cals = append(cals, cal)
		// One shuffled order of the variants per round, run in ABBA
		// blocks: forward at one level, backward at the next (abba).
		order := shuffledOf(r, variants)
		first := map[string]int{} // variant -> its repeat at the search's first step
		levels := shuffledOf(r, loads)
		for li, l := range levels {
			for _, pv := range abba(order, li) {
				if !runsAt(pv.name, l) {
					continue
				}
				v := s.variant(fmt.Sprintf("%s@%.0f%%", pv.name, l*100))
				r.step(fmt.Sprintf("%s: %s (pair %d)", s.Name, v.Name, round+1))
				n := len(v.Repeats)
				if err := once(v, strings.TrimSuffix(pv.name, aaSuffix), cal.capacity*l); err != nil {
					v.Valid, v.Invalid = false, err.Error()
				}
				if len(v.Repeats) > n {
					if v.Repeats[n].Extra == nil {
						v.Repeats[n].Extra = map[string]float64{}
					}
					v.Repeats[n].Extra["capacity_per_s"] = cal.capacity
					if l == searchSteps[0] {
						first[pv.name] = n
					}
				}
			}
		}
		if search && cal.failure == "" {
			var names []string
			for _, pv := range order {
				names = append(names, pv.name)
			}
			// The search's steps continue the ABBA alternation: its first
			// is the level run last when that was the 80 % level.
			r.searchCapacity(s, names, first, cal.capacity, round, len(levels)-1, once)
		}
	}
	if checks != nil {
		r.pairs(s, checks, round)
	} else { // a second set of levels of a scenario already paired: as many rounds
		for i := range s.Pairs {
			round(i)
		}
	}
	for _, v := range s.Variants {
		for i := range v.Repeats {
			if c := v.Repeats[i].Extra["capacity_per_s"]; c > 0 {
				v.Repeats[i].Extra["goodput_of_capacity"] = v.Repeats[i].Extra["goodput_per_s"] / c
			}
		}
		finishLoadVariant(v)
	}
	return cals
}

// mixSeedOf is the seed of the generator's request mix in one round of a
// scenario: every variant of the round (and its capacity measurement)
// gets the same sequence of kinds, each round another one.
func mixSeedOf(seed int64, scenario string, round int) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%s/%d", seed, scenario, round)
	return h.Sum64()
}

// overloadOnly names the alternatives the load scenarios compare with
// only above capacity (loadChecks' overloadAlts): the shedding shapes a
// user deploys for overload. A scenario whose control one of them is runs
// it at every level.
var overloadOnly = map[string]bool{"pool-503": true, "sem-deadline": true}

// aaSuffix names a variant's A/A control: the same variant run again in
// the same rounds.
const aaSuffix = "-aa"

// caseOf is the case a load variant belongs to, by its name: "" alone,
// else its case's suffix ("+quota1.5" for "sem+quota1.5-aa@80%"). The
// variants of a case share its calibration.
func caseOf(name string) string {
	name, _, _ = strings.Cut(name, "@")
	_, suf := baseName(name)
	return strings.TrimSuffix(suf, aaSuffix)
}

// aaDesc describes control's A/A control (--list).
func aaDesc(control string) string {
	return fmt.Sprintf("the A/A control: %s again, alternated in the same rounds (nothing changed but the run); its ratio to %s is the equivalence margin of the comparisons of its case", control, control)
}

// besideShare is the time a load scenario's level beside the competitor
// takes per round, as a share of a round of its levels alone: one
// capacity measurement and one run per variant, against one, one per
// variant and level, and the capacity search's steps (r.search must be
// set first). 0 when the run has no beside case.
func besideShare(r *Runner, variants []struct{ name, desc string }, loads []float64) float64 {
	if _, ok := r.besideCase(loads); !ok {
		return 0
	}
	n := 1 // the A/A control
	for _, v := range variants {
		if r.runs(v.name) && r.wants(v.name) {
			n++
		}
	}
	alone := capacitySteps + n*len(loads)
	if r.search && slices.Contains(loads, searchSteps[0]) {
		alone += searchStepsPerRound * n
	}
	return float64(capacitySteps+n) / float64(alone)
}

// aaOf is the A/A control's variant of a load scenario.
func aaOf(scenario string) string {
	switch {
	case scenario == "inference":
		return "pool"
	case strings.HasPrefix(scenario, "realserver-vips"), strings.HasPrefix(scenario, "realserver-zstd"):
		return vipsControl
	case strings.HasSuffix(scenario, "-mixed"):
		return mixedControl
	case strings.HasPrefix(scenario, "realserver"):
		return realserverControl
	}
	return "pool-503"
}

// finishLoadVariant derives an open-loop variant's goodput of the offered
// rate and shed share over its repeats, and marks it invalid when its
// responses had errors or the generator sent less than 99 % of the
// offered rate.
func finishLoadVariant(v *Variant) {
	if v.OfferedPS > 0 {
		v.setExtra("goodput_of_offered", v.Extra["goodput_per_s"]/v.OfferedPS)
		v.setExtra("shed_share", v.Extra["shed"]/max(v.Extra["sent"], 1))
	}
	if v.Valid && v.Extra["errors"] > 0 {
		v.Valid, v.Invalid = false, fmt.Sprintf("%.0f responses were errors", v.Extra["errors"])
	}
	err := rateValid(v.AchievedPS, v.OfferedPS)
	if err != nil && overloadLevel(v.Name) && v.AchievedPS >= 0.95*v.OfferedPS {
		// In overload the server takes every CPU it can, the generator's
		// share too: what it sent is still twice the capacity or more,
		// and the goodput and p99 are of what it sent.
		v.setExtra("sent_share_of_offer", v.AchievedPS/v.OfferedPS)
		err = nil
	}
	if v.Valid && err != nil {
		v.Valid, v.Invalid = false, err.Error()
	}
}

// overloadLevel reports whether a load variant's level ("name@200%") is
// above capacity.
func overloadLevel(name string) bool {
	_, at, ok := strings.Cut(name, "@")
	if !ok {
		return false
	}
	pct, err := strconv.ParseFloat(strings.TrimSuffix(at, "%"), 64)
	return err == nil && pct > 100
}

// respond answers a scenario's request: 503 when the executor shed it
// (ErrSaturated), 500 on any other error, 200 "ok" otherwise.
func respond(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, cpuwork.ErrSaturated):
		http.Error(w, "saturated", http.StatusServiceUnavailable)
	case err != nil:
		http.Error(w, err.Error(), http.StatusInternalServerError)
	default:
		w.Write([]byte("ok\n"))
	}
}

// loadgenIn puts the load generator of the scenario's runs in a cgroup of
// its own at weight (when root; else it shares the bench's, said in a
// note); call the returned func when the scenario is done.
func (r *Runner) loadgenIn(s *Scenario, weight uint64, why string) (undo func()) {
	if os.Geteuid() != 0 {
		s.Notes = append(s.Notes, "the load generator shares the bench's cgroup (a cgroup of its own needs root)")
		return func() {}
	}
	g, err := newGroup("bench-loadgen", cgroup.Config{Weight: weight})
	if err != nil {
		s.Notes = append(s.Notes, "the load generator shares the bench's cgroup: "+err.Error())
		return func() {}
	}
	r.loadgenGroup = g
	s.Notes = append(s.Notes, fmt.Sprintf("the load generator runs in a cgroup of its own (weight %d), %s", weight, why))
	return func() { removeGroup(g); r.loadgenGroup = nil }
}
