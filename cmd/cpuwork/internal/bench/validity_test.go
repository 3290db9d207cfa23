package bench

import (
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestValidityChecksFailWhereTheMeasurementWasNotMade(t *testing.T) {
	cases := []struct {
		name      string
		ok, bad   error
		wantInBad string
	}{
		{"canary", canaryValid(1000, time.Second), canaryValid(949, time.Second), "949 of 1000 marks"},
		{"echo", echoValid(10, 10), echoValid(9, 10), "9 of 10 echoes"},
		{"no echo sent", echoValid(1, 1), echoValid(0, 0), "0 of 0"},
		{"probe", probeValid(100, time.Second), probeValid(94, time.Second), "94 of its 100"},
		{"periods", periodsValid(1, "/g"), periodsValid(0, "/g"), "no CFS periods"},
		{"cpu", cpuValid(0.1, "child"), cpuValid(0, "child"), "CPU time not read"},
		{"rate", rateValid(99, 100), rateValid(98.9, 100), "98.9/s of 100.0/s"},
	}
	for _, c := range cases {
		if c.ok != nil {
			t.Errorf("%s: a valid run refused: %v", c.name, c.ok)
		}
		if c.bad == nil || !strings.Contains(c.bad.Error(), c.wantInBad) {
			t.Errorf("%s: got %v, want an error with %q", c.name, c.bad, c.wantInBad)
		}
	}
}

func TestLoadLevelsThatAreNotWhatTheySayAreNotJudged(t *testing.T) {
	// served is goodput / offered per level (50, 80, 110 %), shed the 503s.
	mk := func(served [3]float64, shed float64) *Scenario {
		s := &Scenario{Name: "service"}
		for i, l := range []float64{0.5, 0.8, 1.1} {
			v := &Variant{Name: []string{"pool@50%", "pool@80%", "pool@110%"}[i], Valid: true}
			v.Repeats = []Repeat{{Extra: map[string]float64{"goodput_per_s": served[i] * l * 100, "shed_share": shed, "cpu_share_of_slots": l, "capacity_per_s": 100}}}
			s.Variants = append(s.Variants, v)
		}
		return s
	}
	r := &Runner{}
	loads := []float64{0.5, 0.8, 1.1}
	cal := []calibration{{capacity: 100, cpuShare: 0.95}}
	s := mk([3]float64{0.95, 0.9, 0.96}, 0)
	r.checkLoads(s, "pool", loads, cal)
	if s.Calibration != "" {
		t.Errorf("levels that keep up below and not above capacity refused: %s", s.Calibration)
	}
	s = mk([3]float64{0.95, 0.89, 0.9}, 0) // 80 % already an overload
	r.checkLoads(s, "pool", loads, cal)
	if !strings.Contains(s.Calibration, "at 80% pool served 89%") {
		t.Errorf("calibration %q", s.Calibration)
	}
	s = mk([3]float64{1, 1, 0.99}, 0) // 110 % served in full: no overload
	r.checkLoads(s, "pool", loads, cal)
	if !strings.Contains(s.Calibration, "underestimated") {
		t.Errorf("calibration %q", s.Calibration)
	}
	s = mk([3]float64{1, 1, 0.99}, 0.02) // 110 % served but shedding: an overload
	r.checkLoads(s, "pool", loads, cal)
	if s.Calibration != "" {
		t.Errorf("a shedding overload refused: %s", s.Calibration)
	}
	// Each repeat is judged against the capacity measured before it: 80 %
	// of a repeat measured at 90/s served in full is no overload, whatever
	// the other repeats measured.
	s = mk([3]float64{0.95, 0.9, 0.96}, 0)
	s.Variants[1].Repeats = append(s.Variants[1].Repeats, Repeat{Extra: map[string]float64{"goodput_per_s": 72, "capacity_per_s": 90}})
	r.checkLoads(s, "pool", loads, append(cal, calibration{capacity: 90}))
	if s.Calibration != "" {
		t.Errorf("a repeat judged against another repeat's capacity: %s", s.Calibration)
	}
	s.Variants[1].Repeats[1].Extra["goodput_per_s"] = 64 // 89 % of 72/s
	r.checkLoads(s, "pool", loads, append(cal, calibration{capacity: 90}))
	if !strings.Contains(s.Calibration, "at 80% pool served 89% of the offer in repeat 2") {
		t.Errorf("calibration %q", s.Calibration)
	}
	judgeChecks(s, []check{{label: "x", judged: "pool@50%", metric: "cpu_share_of_slots", limit: 1}})
	s.Calibration = "x"
	judgeChecks(s, []check{{label: "x", judged: "pool@50%", metric: "cpu_share_of_slots", limit: 1}})
	if s.Status != StatusNotJudged {
		t.Errorf("judged on a failed calibration: %q", s.Status)
	}
}

// A batch-alone reference measured low in one round (batch beside critical
// load did more than 125 % of it) says nothing about the variants' critical
// latency: the latency checks of that case stay judged; only the batch share
// of that round, for every variant of the case, is dropped.
func TestAnInvalidBatchReferenceDropsTheShareNotTheLatency(t *testing.T) {
	mk := func(name string, p99 float64, shares ...float64) *Variant {
		v := &Variant{Name: name, Valid: true}
		for _, sh := range shares {
			v.Repeats = append(v.Repeats, Repeat{Latency: Latency{P99: p99}, Extra: map[string]float64{"batch_share_of_alone": sh}})
		}
		return v
	}
	s := &Scenario{Name: "priority", Variants: []*Variant{
		mk("cpuwork", 0.005, 0.9, 0.9, 0.9),
		mk("goroutines", 0.02, 0.9, 0.9, 0.9),
		mk("goroutines-yield", 0.01, 0.9, 0.9, 0.9),
		mk("cpuwork+sibling", 0.006, 0.95, 0.9, 1.1),
		mk("goroutines+sibling", 0.02, 0.9, 0.9, 1.2),
		mk("goroutines-yield+sibling", 0.01, 0.9, 0.9, 1.32), // repeat 3's reference was low
	}}
	dropInvalidReferences(s)
	for _, v := range s.Variants {
		if !v.Valid {
			t.Errorf("%s marked invalid: %s", v.Name, v.Invalid)
		}
		_, suf := baseName(v.Name)
		for i, rp := range v.Repeats {
			_, has := rp.Extra["batch_share_of_alone"]
			if want := !(suf == "+sibling" && i == 2); has != want {
				t.Errorf("%s repeat %d: batch share kept %v, want %v", v.Name, i+1, has, want)
			}
		}
	}
	if len(s.Notes) != 1 || !strings.Contains(s.Notes[0], "sibling") || !strings.Contains(s.Notes[0], "repeat 3") {
		t.Errorf("notes %q: want one naming the case and the repeat", s.Notes)
	}
	lat := evaluate(s, check{label: "sibling: critical p99", judged: "cpuwork+sibling", against: []string{"goroutines+sibling", "goroutines-yield+sibling"}, metric: "p99"})
	if lat.Verdict != Better || lat.Pairs != 3 {
		t.Errorf("latency check: %s on %d pairs %s, want better on 3", lat.Verdict, lat.Pairs, lat.NotJudged)
	}
	share := evaluate(s, check{label: "sibling: batch", judged: "cpuwork+sibling", metric: "batch_share_of_alone", higher: true, limit: 0.9})
	if share.NotJudged != "" || share.Pairs != 2 || len(share.Notes) == 0 || !strings.Contains(share.Notes[0], "pair 3 left out") {
		t.Errorf("batch share figure: %d pairs, notes %q, %s: want repeat 3 left out", share.Pairs, share.Notes, share.NotJudged)
	}
	alone := evaluate(s, check{label: "alone: batch", judged: "cpuwork", metric: "batch_share_of_alone", higher: true, limit: 0.9})
	if alone.NotJudged != "" || alone.Pairs != 3 {
		t.Errorf("alone batch share figure: %d pairs %s, want 3", alone.Pairs, alone.NotJudged)
	}
}

// The capacity is the highest open-loop rate the best alternative keeps up
// with, found by stepping down from its closed-loop throughput: a server
// that keeps up with 450/s open loop but served 500/s closed loop gets 450,
// not 500 (the closed loop's 500 made "95 %" an overload in seed 171).
func TestCapacityIsTheOpenLoopRateKeptUpWith(t *testing.T) {
	server := func(sustains float64) func(rate float64) (float64, float64, error) {
		return func(rate float64) (float64, float64, error) {
			if rate <= sustains {
				return 0.99 * rate, rate / sustains, nil // a queue left at the end
			}
			return 0.9 * sustains, 1, nil // overloaded: less than it sustains
		}
	}
	at, tried, ok, err := descendToCapacity(500, server(460))
	if err != nil || !ok || at.rate != 450 {
		t.Fatalf("capacity %v (ok %v, err %v), want 450/s", at.rate, ok, err)
	}
	if len(tried) != 4 || tried[0].rate != 500 || tried[1].rate != 475 || tried[0].served >= keepsUp || tried[3].rate != 462 {
		t.Errorf("steps %+v, want 500 and 475 refused, 450 kept up with, then 462 halfway refused", tried)
	}
	// Kept up with halfway between the first step kept up with and the
	// one above it: the capacity is the halfway rate.
	at, tried, ok, _ = descendToCapacity(500, server(470))
	if !ok || at.rate != 462 || len(tried) != 4 {
		t.Errorf("capacity %v after %+v, want 462 (halfway between 450 and 475)", at.rate, tried)
	}
	at, _, ok, _ = descendToCapacity(500, server(600))
	if !ok || at.rate != 500 {
		t.Errorf("a closed-loop rate kept up with open loop: got %v, want 500", at.rate)
	}
	_, tried, ok, err = descendToCapacity(500, server(100))
	if ok || err != nil || len(tried) != len(capacityFactors) {
		t.Errorf("no rate kept up with: ok %v err %v after %d steps, want not ok after %d", ok, err, len(tried), len(capacityFactors))
	}
	// Small rates round to whole requests per second and are offered once.
	_, tried, _, _ = descendToCapacity(3, server(0.5))
	for i := 1; i < len(tried); i++ {
		if tried[i].rate == tried[i-1].rate {
			t.Errorf("rate %v offered twice: %+v", tried[i].rate, tried)
		}
	}
	boom := errors.New("generator failed")
	// A failed halfway step fails the descent like any other.
	_, _, ok, err = descendToCapacity(500, func(rate float64) (float64, float64, error) {
		if rate == 462 {
			return 0, 0, boom
		}
		return server(460)(rate)
	})
	if ok || !errors.Is(err, boom) {
		t.Errorf("a failed halfway step: ok %v err %v, want the step's error", ok, err)
	}
	_, _, ok, err = descendToCapacity(500, func(float64) (float64, float64, error) { return 0, 0, boom })
	if ok || !errors.Is(err, boom) {
		t.Errorf("a failed step: ok %v err %v, want the step's error", ok, err)
	}
}

// The keep-up test of the capacity descent counts no request in flight at
// the run's end as lost. A simulated 2-server FCFS queue (9 requests of
// 36 ms to one of 532 ms, imageproxy's mix beside a busy loop), offered
// open loop for 2 s: at 80 % of its capacity it answers 93.6 % of the
// offer within the run (the rest are in flight, answered in time), which
// a 97 % test took for not keeping up; by keptUpRate it keeps up (97.5 %),
// and at 110 % and 120 % it does not (93 %, 92 %), for 2 s and 5 s runs.
func TestKeptUpRateCountsNoRequestInFlightAsLost(t *testing.T) {
	service := func(i int) time.Duration {
		if i%10 == 3 {
			return 532 * time.Millisecond
		}
		return 36 * time.Millisecond
	}
	const servers = 2
	mean := (9*36*time.Millisecond + 532*time.Millisecond) / 10
	capacity := servers / mean.Seconds()
	// run offers rate for d; it returns the answers per second of the
	// run (goodput_per_s) and keptUpRate, as shares of the offer.
	run := func(load float64, d time.Duration) (perRun, keptUp float64) {
		rate := load * capacity
		interval := time.Duration(float64(time.Second) / rate)
		var free [servers]time.Duration
		inWindow, sumLat := 0, time.Duration(0)
		for i := 0; time.Duration(i+1)*interval <= d; i++ {
			arrive := time.Duration(i+1) * interval
			k := 0
			if free[1] < free[0] {
				k = 1
			}
			start := max(arrive, free[k])
			free[k] = start + service(i)
			if free[k] <= d {
				inWindow++
				sumLat += free[k] - arrive
			}
		}
		return float64(inWindow) / d.Seconds() / rate, keptUpRate(inWindow, sumLat/time.Duration(max(inWindow, 1)), d) / rate
	}
	perRun, keptUp := run(0.8, 2*time.Second)
	if perRun >= keepsUp || keptUp < keepsUp {
		t.Errorf("80 %% for 2 s: answered within the run %.3f, kept up %.3f of the offer; want under %.2f and at least it", perRun, keptUp, keepsUp)
	}
	for _, d := range []time.Duration{2 * time.Second, 5 * time.Second} {
		for _, load := range []float64{1.1, 1.2} {
			if _, keptUp := run(load, d); keptUp >= keepsUp {
				t.Errorf("%.0f %% for %v: kept up %.3f of the offer, want under %.2f", 100*load, d, keptUp, keepsUp)
			}
		}
		if _, keptUp := run(0.8, d); keptUp < keepsUp {
			t.Errorf("80 %% for %v: kept up %.3f of the offer, want at least %.2f", d, keptUp, keepsUp)
		}
	}
}

// A repeat whose load levels were not what they say (this machine drifts
// within a repeat) is left out of every check; the scenario is judged on
// the other repeats, and not at all when fewer than two remain.
func TestARepeatWithMislabelledLevelsIsNotJudged(t *testing.T) {
	mk := func(served110 [3]float64) *Scenario {
		s := &Scenario{Name: "inference"}
		for _, name := range []string{"pool", "cpuwork"} {
			for _, l := range []float64{0.8, 1.1} {
				v := &Variant{Name: fmt.Sprintf("%s@%.0f%%", name, l*100), Valid: true}
				for i := range 3 {
					served := 0.99
					if l == 1.1 {
						served = served110[i]
					}
					p99 := 0.05 // cpuwork at 0.5x the pool, except in repeat 3
					if name == "pool" || i == 2 {
						p99 = 0.1
					}
					v.Repeats = append(v.Repeats, Repeat{Latency: Latency{P99: p99}, Extra: map[string]float64{"goodput_per_s": served * l * 100, "capacity_per_s": 100}})
				}
				s.Variants = append(s.Variants, v)
			}
		}
		return s
	}
	cals := []calibration{{capacity: 100}, {capacity: 100}, {capacity: 100}}
	checks := []check{{label: "110%: p99", judged: "cpuwork@110%", against: []string{"pool@110%"}, metric: "p99", limit: 0.6}}
	s := mk([3]float64{0.9, 0.9, 0.99}) // repeat 3: 110 % kept up with
	(&Runner{}).checkLoads(s, "pool", []float64{0.8, 1.1}, cals)
	if s.Calibration != "" {
		t.Fatalf("one mislabelled repeat of three voided the scenario: %s", s.Calibration)
	}
	for _, v := range s.Variants {
		if v.Repeats[2].NotJudged == "" || v.Repeats[0].NotJudged != "" {
			t.Errorf("%s: repeats marked %q %q %q, want only repeat 3", v.Name, v.Repeats[0].NotJudged, v.Repeats[1].NotJudged, v.Repeats[2].NotJudged)
		}
	}
	judgeChecks(s, checks)
	if s.Status != StatusBetter || s.Checks[0].Pairs != 2 {
		t.Errorf("status %s on %d pairs, want better on 2 (repeat 3 left out): %s", s.Status, s.Checks[0].Pairs, s.Verdict)
	}
	if !strings.Contains(s.Verdict, "repeat 3 not judged") {
		t.Errorf("the verdict does not say which repeat was left out: %s", s.Verdict)
	}
	s = mk([3]float64{0.99, 0.9, 0.99}) // two of three mislabelled
	(&Runner{}).checkLoads(s, "pool", []float64{0.8, 1.1}, cals)
	if !strings.Contains(s.Calibration, "repeat 1") || !strings.Contains(s.Calibration, "repeat 3") {
		t.Errorf("two of three repeats mislabelled: calibration %q, want both named", s.Calibration)
	}
	judgeChecks(s, checks)
	if s.Status != StatusNotJudged {
		t.Errorf("judged on one repeat: %s", s.Verdict)
	}
}

// Progress never shows more steps done than its total, when a scenario
// takes more steps than it counted (the capacity descent).
func TestProgressNeverPassesItsTotal(t *testing.T) {
	var bad []string
	r := &Runner{total: 3}
	r.cfg.Step = func(done, total int, what string) {
		if done >= total {
			bad = append(bad, fmt.Sprintf("%s: [%d/%d]", what, done, total))
		}
	}
	for i := range 6 {
		r.step(fmt.Sprintf("step %d", i))
	}
	if len(bad) > 0 {
		t.Errorf("progress past its total: %v", bad)
	}
}

// A variant that sheds its slowest requests must not get a lower "p99 of
// all requests" for it: a shed request counts as never answered.
func TestSheddingTheSlowestDoesNotLowerTheP99OfAll(t *testing.T) {
	hist := func(n int) *histT {
		h := newHist()
		for i := 1; i <= n; i++ {
			h.RecordValue(int64(i) * 1000) // i ms, in µs
		}
		return h
	}
	all, _ := p99OfAll(hist(1000), 0)
	for _, shed := range []int{1, 5, 9} {
		got, _ := p99OfAll(hist(1000-shed), float64(shed)/1000)
		if got < all*0.995 {
			t.Errorf("the 1000 requests' p99 is %.3fs; with the %d slowest shed it reads %.3fs", all, shed, got)
		}
		if served := latencyOf(hist(1000 - shed)).P99; shed >= 5 && served >= all {
			t.Errorf("test data: the served p99 (%.3fs) should fall below %.3fs when %d are shed", served, all, shed)
		}
	}
	// Over 1 % unanswered: the slowest answer, a lower bound (the answered
	// check fails such a repeat).
	if got, _ := p99OfAll(hist(900), 0.1); got < 0.9*0.995 || got > 0.9*1.005 {
		t.Errorf("10%% unanswered: got %.3fs, want the slowest answer 0.900s", got)
	}
	// Nothing answered: no p99 at all, not a perfect 0.
	if got, ok := p99OfAll(newHist(), 1); ok {
		t.Errorf("nothing answered: got %v, want no value", got)
	}
}

// The A/A control runs the control variant again, under its own name, at
// every level in every round, and a comparison's margin is how far its
// ratio to the control lies from 1.
func TestTheAAControlRunsTheControlAgainAtEveryLevel(t *testing.T) {
	r := &Runner{rounds: 2, maxRounds: 2}
	s := &Scenario{Name: "load"}
	vs := []struct{ name, desc string }{{"pool", ""}, {"cpuwork", ""}}
	p99 := map[string]float64{"pool": 0.050, "cpuwork": 0.060}
	runs := map[string]int{}
	calls := 0
	once := func(v *Variant, variant string, rate float64) error {
		calls++
		runs[v.Name+" as "+variant]++
		x := p99[variant]
		if strings.HasPrefix(v.Name, "pool-aa") {
			x *= 1.5 // the same server, a slower run
		}
		v.addRun(newHist(), nil, usage{})
		v.Repeats[len(v.Repeats)-1].P99 = x
		return nil
	}
	loads := []float64{0.5, 0.8}
	checks := func() []check {
		return []check{{label: "80%: p99", judged: "cpuwork@80%", against: []string{"pool@80%"}, metric: "p99", aa: [2]string{"pool@80%", "pool-aa@80%"}}}
	}
	r.atLoads(s, vs, loads, "pool", checks, func(int) calibration { return calibration{capacity: 100} }, once)
	if got, want := calls, 2*3*2; got != want {
		t.Errorf("%d runs, want %d (2 variants and the control at 2 levels, twice)", got, want)
	}
	for _, name := range []string{"pool-aa@50% as pool", "pool-aa@80% as pool"} {
		if runs[name] != 2 {
			t.Errorf("%s ran %d times, want 2 (runs: %v)", name, runs[name], runs)
		}
	}
	judgeChecks(s, checks())
	c := s.Checks[0]
	if math.Abs(c.Margin-0.5) > 1e-9 || c.AAPairs != 2 || math.Abs(c.AAEstimate-1.5) > 1e-9 {
		t.Errorf("margin %v from A/A %v on %d pairs, want 0.5 from 1.5 on 2", c.Margin, c.AAEstimate, c.AAPairs)
	}
	// The pool against itself 1.5x in both pairs: an unstable control,
	// whose comparisons are not judged (it no longer widens the margin).
	if c.Verdict != "" || !strings.Contains(c.NotJudged, "unstable control") {
		t.Errorf("verdict %s, want not judged (unstable control): %s", c.Verdict, c.line())
	}
}

// busyLoops counts the competitor processes (the sh busy loop) this test
// process started and that still run: its children only, since other
// packages' tests, run at the same time by go test, start the same loop.
func busyLoops(t *testing.T) int {
	t.Helper()
	ms, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range ms {
		b, err := os.ReadFile(m)
		if err != nil || !strings.Contains(string(b), "while :; do :; done") {
			continue
		}
		// stat: "pid (comm) state ppid ..."; comm may hold spaces.
		st, err := os.ReadFile(filepath.Join(filepath.Dir(m), "stat"))
		if err != nil {
			continue
		}
		f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+1:]))
		if len(f) > 1 && f[0] != "Z" && f[1] == strconv.Itoa(os.Getpid()) {
			n++
		}
	}
	return n
}

// The load scenarios' 95 % level beside a competitor (service through
// serviceBeside, inference through besideAt with its own variants and
// calibrating pool): every repeat measures the
// capacity again with the competitor running and runs each variant under
// its base name at 95 % of it with the competitor running; the competitor
// is gone afterwards. A capacity that cannot be measured beside it in one
// repeat of three leaves that repeat not judged; in every repeat, the
// variants not measured; the alone levels' verdict untouched either way.
func TestTheLoadScenariosRunAt95PercentBesideACompetitor(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh to run the competitor with")
	}
	before := busyLoops(t)
	for _, sc := range []struct {
		name, calibrating string
		variants          []struct{ name, desc string }
	}{{"service", "pool-capacity", serviceVariants}, {"inference", "pool", inferenceVariants}} {
		for _, failCapacity := range []string{"none", "every", "first"} {
			pairs := 2
			if failCapacity == "first" {
				pairs = 3
			}
			r := &Runner{rounds: pairs}
			s := &Scenario{Name: sc.name, Pairs: pairs} // the alone levels ran as many pairs
			calibrations := 0
			var ran []string
			var calibrated []string
			once := func(v *Variant, variant string, rate float64) error {
				if n := busyLoops(t); n != before+1 {
					t.Errorf("%s ran beside %d competitors, want 1", v.Name, n-before)
				}
				if v.Name == "calibration" {
					calibrated = append(calibrated, variant)
					if rate == 0 {
						calibrations++
					}
					if failCapacity == "every" || (failCapacity == "first" && calibrations == 1) {
						return errors.New("planted failure")
					}
					v.addRun(newHist(), nil, usage{})
					served := rate
					if rate == 0 {
						served = 100 // closed loop; every open-loop step keeps up
					}
					v.Repeats[0].Extra = map[string]float64{"goodput_per_s": served, "kept_up_per_s": served}
					return nil
				}
				ran = append(ran, fmt.Sprintf("%s as %s at %.0f", v.Name, variant, rate))
				v.addRun(newHist(), nil, usage{})
				return nil
			}
			if sc.name == "service" {
				r.serviceBeside(s, besideCompetition, 50, once)
			} else {
				r.besideAt(s, sc.variants, sc.calibrating, besideCompetition, 50, once)
			}
			if len(calibrated) == 0 || slices.ContainsFunc(calibrated, func(c string) bool { return c != sc.calibrating }) {
				t.Errorf("%s: capacity measured by %v, want %s only", sc.name, calibrated, sc.calibrating)
			}
			if n := busyLoops(t); n != before {
				t.Errorf("%d competitors left running", n-before)
			}
			if s.Calibration != "" {
				t.Errorf("the beside case touched the scenario's calibration: %q", s.Calibration)
			}
			v := s.variant("cpuwork+nice0@80%")
			if v == nil {
				t.Fatalf("%s: no cpuwork+nice0@80%% among %d variants", sc.name, len(s.Variants))
			}
			switch failCapacity {
			case "every":
				if v.Valid || !strings.Contains(v.Invalid, "not measured") {
					t.Errorf("capacity failed beside the competitor in every repeat: valid %v (%q)", v.Valid, v.Invalid)
				}
				continue
			case "first":
				if !v.Valid || len(v.Repeats) != 3 || !strings.Contains(v.Repeats[0].NotJudged, "not measured before repeat 1") || v.Repeats[1].NotJudged != "" || v.Repeats[2].NotJudged != "" {
					t.Errorf("capacity failed beside the competitor in repeat 1 of 3: valid %v (%q), %d repeats, not judged %q", v.Valid, v.Invalid, len(v.Repeats), v.Repeats[0].NotJudged)
				}
				continue
			}
			if !v.Valid || len(v.Repeats) != 2 {
				t.Errorf("cpuwork+nice0@80%%: valid %v (%q), %d repeats, want 2", v.Valid, v.Invalid, len(v.Repeats))
			}
			n := 1 // the A/A control
			for _, sv := range sc.variants {
				// An overload alternative that is not the control runs
				// above capacity only: never at the beside case's 80 %.
				if r.runs(sv.name) && (!overloadOnly[sv.name] || sv.name == aaOf(sc.name)) {
					n++
				}
			}
			want := "cpuwork+nice0@80% as cpuwork at 80"
			aa := aaOf(sc.name) + "+nice0-aa@80% as " + aaOf(sc.name) + " at 80"
			if !slices.Contains(ran, want) || !slices.Contains(ran, aa) || len(ran) != 2*n {
				t.Errorf("%s: runs %v: want %q and %q among %d", sc.name, ran, want, aa, 2*n)
			}
		}
	}
}

func TestTheBesideCaseRunsWithItsCompetitionAndLevel(t *testing.T) {
	for _, c := range []struct {
		cfg   Config
		loads []float64
		want  bool
	}{
		{Config{}, serviceLoads, true},
		{Config{Quick: true}, serviceLoads, true},
		{Config{Compete: []string{"alone"}}, serviceLoads, false},
		{Config{Compete: []string{"nice0"}}, serviceLoads, true},
		{Config{}, []float64{0.95}, false},
	} {
		r := &Runner{cfg: c.cfg}
		if _, got := r.besideCase(c.loads); got != c.want {
			t.Errorf("compete %v quick %v loads %v: beside %v, want %v", c.cfg.Compete, c.cfg.Quick, c.loads, got, c.want)
		}
	}
	r := &Runner{cfg: Config{Variants: []string{"naive"}}}
	if !r.wants("naive+nice0") || r.wants("cpuwork+nice0") || !r.wants("naive") {
		t.Error("--variants naive: want naive and naive+nice0, not cpuwork+nice0")
	}
}

// A repeat whose capacity runs failed is not judged, whatever its levels
// served (they are fractions of an estimate); the scenario is judged on
// the other repeats while two remain, and is not judged, naming the
// failure, when fewer do. (One failed capacity run of twelve left the
// whole scenario not judged: docs/raw/realserver-imageproxy-80-nice0-seed2858.txt.)
// Another case's variants (the quota case's), calibrated on their own, are
// judged in that repeat (seed 2859 left the beside case's repeats out for
// the quota case's failures).
func TestAFailedCapacityRunLeavesItsRepeatNotJudged(t *testing.T) {
	mk := func(n int) *Scenario {
		s := &Scenario{Name: "load"}
		for _, name := range []string{"pool", "cpuwork", "pool+quota1.5-aa"} {
			v := &Variant{Name: name + "@80%", Valid: true}
			for range n {
				p99 := 0.1
				if name == "cpuwork" {
					p99 = 0.05
				}
				v.Repeats = append(v.Repeats, Repeat{Latency: Latency{P99: p99}, Extra: map[string]float64{"goodput_per_s": 79, "capacity_per_s": 100}})
			}
			s.Variants = append(s.Variants, v)
		}
		return s
	}
	failed := calibration{capacity: 80, failure: "the capacity runs of pool failed (planted)", note: "ESTIMATED 80/s"}
	checks := []check{{label: "p99", judged: "cpuwork@80%", against: []string{"pool@80%"}, metric: "p99"}}
	s := mk(3)
	(&Runner{}).checkLoads(s, "pool", []float64{0.8}, []calibration{{capacity: 100}, failed, {capacity: 100}})
	if s.Calibration != "" {
		t.Fatalf("one failed capacity run of three voided the scenario: %s", s.Calibration)
	}
	for _, v := range s.Variants {
		if strings.Contains(v.Name, "quota") { // another case, calibrated on its own
			if v.Repeats[1].NotJudged != "" {
				t.Errorf("%s: repeat 2 not judged for the alone case's failed calibration: %q", v.Name, v.Repeats[1].NotJudged)
			}
			continue
		}
		if !strings.Contains(v.Repeats[1].NotJudged, "before repeat 2 the capacity runs of pool failed") || v.Repeats[0].NotJudged != "" || v.Repeats[2].NotJudged != "" {
			t.Errorf("%s: repeats marked %q %q %q, want only repeat 2", v.Name, v.Repeats[0].NotJudged, v.Repeats[1].NotJudged, v.Repeats[2].NotJudged)
		}
	}
	judgeChecks(s, checks)
	if s.Checks[0].Pairs != 2 {
		t.Errorf("judged on %d pairs, want 2 (repeat 2 left out): %s", s.Checks[0].Pairs, s.Verdict)
	}
	s = mk(2)
	(&Runner{}).checkLoads(s, "pool", []float64{0.8}, []calibration{{capacity: 100}, failed})
	if !strings.Contains(s.Calibration, "the capacity runs of pool failed (planted)") {
		t.Errorf("calibration %q, want the failed run's", s.Calibration)
	}
	judgeChecks(s, checks)
	if s.Status != StatusNotJudged {
		t.Errorf("status %v, want not judged", s.Status)
	}
}

// In overload a generator that sent 95-99 % of the offer still offered
// twice the capacity: the variant stays valid (the share it sent is
// recorded); below capacity, or under 95 %, it does not.
func TestAnOverloadedGeneratorsShortfallIsToleratedTo95Percent(t *testing.T) {
	for _, c := range []struct {
		name     string
		achieved float64
		valid    bool
	}{{"naive@200%", 96.5, true}, {"naive@200%", 94, false}, {"naive@80%", 96.5, false}, {"naive@80%", 99.5, true}} {
		v := &Variant{Name: c.name, Valid: true, OfferedPS: 100, AchievedPS: c.achieved, Extra: map[string]float64{}}
		finishLoadVariant(v)
		if v.Valid != c.valid {
			t.Errorf("%s sent %.1f of 100/s: valid %v (%s), want %v", c.name, c.achieved, v.Valid, v.Invalid, c.valid)
		}
	}
}

// The default run asks every declared level of the load scenarios — below
// capacity, the capacity search and the case beside a competitor too — as
// --repeat and --quick do; --loads replaces them and --thorough adds its
// own. The beside case runs with the 80 % level.
func TestTheDefaultRunAsksEveryDeclaredLevel(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want []float64
	}{
		{Config{}, serviceLoads},
		{Config{Loads: []float64{0.8}}, []float64{0.8}},
		{Config{Repeat: 6}, serviceLoads},
		{Config{Quick: true}, serviceLoads},
		{Config{Thorough: true}, thoroughLoads},
	} {
		r := &Runner{cfg: c.cfg}
		got := r.loadLevels(serviceLoads)
		if !slices.Equal(got, c.want) {
			t.Errorf("%+v: loads %v, want %v", c.cfg, got, c.want)
		}
		if _, beside := r.besideCase(got); beside != slices.Contains(got, besideLevel) {
			t.Errorf("%+v: beside case %v at loads %v", c.cfg, beside, got)
		}
	}
	if !slices.Equal(serviceLoads, []float64{0.8, 2}) {
		t.Errorf("serviceLoads changed: %v", serviceLoads)
	}
}

// The default run judges every comparison it declares: one its pairs
// decide gets its verdict (never "left to --thorough"), and one they do
// not counts as undecided, so that the run takes more pairs for it while
// its time share lasts.
func TestTheDefaultRunJudgesEveryComparison(t *testing.T) {
	c := check{label: "nice0: batch throughput", judged: "cw", against: []string{"alt"}, metric: "mean", aa: [2]string{"alt", "alt-aa"}}
	decided := map[string]map[string][]float64{"cw": {"mean": jitter(0.5, 12)}, "alt": {"mean": jitter(1, 12)}, "alt-aa": {"mean": jitter(1, 12)}}
	s := synth(decided)
	s.Name, s.defaultRun = "priority", true
	judgeChecks(s, []check{c})
	if r := s.Checks[0]; r.Verdict != Better || r.NotJudged != "" {
		t.Errorf("default run, decided: %s, want better", r.line())
	}
	open := map[string]map[string][]float64{"cw": {"mean": {0.7, 1.4, 0.9}}, "alt": {"mean": {1, 1, 1}}, "alt-aa": {"mean": {1.02, 0.98, 1}}}
	s = synth(open)
	s.Name, s.defaultRun = "priority", true
	judgeChecks(s, []check{c})
	if r := s.Checks[0]; r.Verdict != Inconclusive || s.undecided() != 1 {
		t.Errorf("default run, open: %s (undecided %d), want inconclusive and counted", r.line(), s.undecided())
	}
}

// In a mixed-urgency scenario stock serves the interactive levels beside
// the batch clients, so at 80 % of the interactive requests' own capacity
// it falls behind by design: that is not an overestimated capacity, and
// the scenario stays judged (imageproxy's was not judged in any run:
// stock kept up with 68-72 % of its 80 % offer beside batch). Above
// capacity the check still applies.
func TestAMixedScenariosLevelsAreCheckedAboveCapacityOnly(t *testing.T) {
	mk := func(served80, served200 float64) *Scenario {
		s := &Scenario{Name: "realserver-mixed"}
		for i, l := range []float64{0.8, 2} {
			served := []float64{served80, served200}[i]
			v := &Variant{Name: []string{"stock@80%", "stock@200%"}[i], Valid: true}
			v.Repeats = []Repeat{{Extra: map[string]float64{"goodput_per_s": served * l * 100, "capacity_per_s": 100}}}
			s.Variants = append(s.Variants, v)
		}
		return s
	}
	loads := []float64{0.8, 2}
	cal := []calibration{{capacity: 100}}
	s := mk(0.7, 0.4)
	(&Runner{}).checkLoads(s, "stock", mixedCheckedLoads(loads), cal)
	if s.Calibration != "" {
		t.Errorf("stock falling behind at 80 %% beside batch made the scenario unjudged: %s", s.Calibration)
	}
	s = mk(0.7, 1)
	(&Runner{}).checkLoads(s, "stock", mixedCheckedLoads(loads), cal)
	if !strings.Contains(s.Calibration, "underestimated") {
		t.Errorf("stock serving 2x in full beside batch left the scenario judged: %q", s.Calibration)
	}
}
