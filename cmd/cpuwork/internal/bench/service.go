package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/cpuwork/cpuwork"
	"github.com/cpuwork/cpuwork/cgroup"
	"github.com/cpuwork/cpuwork/cmd/cpuwork/internal/workload"
	vegeta "github.com/tsenart/vegeta/v12/lib"
)

var serviceVariants = []struct{ name, desc string }{
	{"naive", "net/http handlers run the work directly on their goroutines"},
	{"cpuwork", "handlers call Executor.Do: Interactive for small requests, Batch for large, with queue-wait targets (MaxQueueWait: Interactive 10 ms, Batch 50 ms); a refused request answers 503"},
	{"cpuwork-sparep", "as cpuwork with Slots = GOMAXPROCS = budget+1 and SpareP: large requests hold at most the budget's slots on SCHED_IDLE threads (DemoteWithSpareP), small ones always find a P and a slot"},
}

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
}

// LoadGen is the hidden `cpuwork loadgen` subcommand: an open-loop vegeta
// attack (constant pacer) at rate requests/s for d against base, writing
// one LoadResult per line to w. It runs in its own process so that the
// generator never competes with the server for its Ps. A request kind
// with a body is a POST of it, else a GET.
func LoadGen(w io.Writer, base string, rate float64, d time.Duration, smallBody, largeBody []byte) error {
	if rate <= 0 || d <= 0 {
		return fmt.Errorf("loadgen: rate %v and duration %v must be positive", rate, d)
	}
	if rate != math.Trunc(rate) {
		return fmt.Errorf("loadgen: rate %v: vegeta's constant pacer sends whole requests per second", rate)
	}
	// 9 small, 1 large, round-robin: the 90/10 mix at a fixed pattern.
	var targets []vegeta.Target
	for i := 0; i < 10; i++ {
		kind := "small"
		if i == 9 {
			kind = "large"
		}
		t := vegeta.Target{Method: "GET", URL: base + "/" + kind}
		if body := map[string][]byte{"small": smallBody, "large": largeBody}[kind]; body != nil {
			t.Method, t.Body = "POST", body
		}
		targets = append(targets, t)
	}
	atk := vegeta.NewAttacker(vegeta.Timeout(30*time.Second), vegeta.KeepAlive(true), vegeta.Connections(10000), vegeta.MaxWorkers(10000))
	pacer := vegeta.ConstantPacer{Freq: int(rate), Per: time.Second}
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	for res := range atk.Attack(vegeta.NewStaticTargeter(targets...), pacer, d, "service") {
		kind := "small"
		if res.URL == base+"/large" {
			kind = "large"
		}
		if err := enc.Encode(LoadResult{Seq: res.Seq, Kind: kind, Timestamp: res.Timestamp,
			LatencyNS: int64(res.Latency), Code: res.Code, Error: res.Error}); err != nil {
			return err
		}
	}
	return bw.Flush()
}

func (r *Runner) service(loadgen []string) (*Scenario, error) {
	s := &Scenario{
		Name:     "service",
		Baseline: "naive",
		Claim:    "a real net/http service with real CPU work under open-loop load: admission with classes keeps p99 bounded near and above capacity (C1: p99 550 -> 120-150 ms)",
	}
	src, err := workload.NewSource()
	if err != nil {
		return nil, err
	}
	small, err := workload.New("regexp", src)
	if err != nil {
		return nil, err
	}
	large, err := workload.New("gzip", src)
	if err != nil {
		return nil, err
	}
	cs, err := workload.Calibrate(small, 5)
	if err != nil {
		return nil, err
	}
	cl, err := workload.Calibrate(large, 3)
	if err != nil {
		return nil, err
	}
	perReq := smallShare*cs.Seconds() + (1-smallShare)*cl.Seconds()
	estimate := float64(r.slots) / perReq
	// Capacity measured, not estimated: the one-core calibrations miss
	// what the real service costs (HTTP, and the workloads' speed in it).
	// The naive server at half the estimate gives the process CPU time per
	// served request; capacity = slots / that.
	if os.Geteuid() == 0 {
		if g, err := cgroup.New(cgroup.Config{Name: fmt.Sprintf("bench-loadgen-%d", os.Getpid()), Weight: 100}); err == nil {
			r.loadgenGroup = g
			defer func() { g.Remove(); r.loadgenGroup = nil }()
			s.Notes = append(s.Notes, "the load generator runs in a cgroup of its own (weight 100), the same for every variant")
		} else {
			s.Notes = append(s.Notes, "the load generator shares the bench's cgroup: "+err.Error())
		}
	} else {
		s.Notes = append(s.Notes, "the load generator shares the bench's cgroup (a cgroup of its own needs root)")
	}
	r.step("service: measuring capacity (naive server at half the estimated capacity)")
	cal := &Variant{Name: "calibration", Valid: true}
	capacity := estimate
	if err := r.serviceOnce(cal, "naive", small, large, estimate/2, loadgen); err == nil {
		// Served requests of this one run (goodput_per_s is averaged over
		// the repeats, so it cannot be used here).
		if served := cal.Repeats[0].Extra["served"]; served > 0 && cal.CPU > 0 {
			capacity = float64(r.slots) / (cal.CPU / served)
		}
	}
	s.Notes = append(s.Notes, fmt.Sprintf("small = regexp over 64 KB (%s), large = gzip+gunzip of 1 MB (%s), 90/10 mix on %d slots: capacity %.0f requests/s measured as slots / process CPU per served request of the naive server at %.0f/s (the one-core calibrations estimated %.0f/s); load levels are fractions of the measured capacity",
		ms(cs.Seconds()), ms(cl.Seconds()), r.slots, capacity, estimate/2, estimate))
	loads := []float64{0.5, 0.8, 0.95, 1.1, 1.5}
	r.atLoads(s, serviceVariants, loads, func(v *Variant, variant string, load float64) error {
		return r.serviceOnce(v, variant, small, large, capacity*load, loadgen)
	})
	// Ratios against naive at the same load.
	for _, l := range loads {
		base := s.variant(fmt.Sprintf("naive@%.0f%%", l*100))
		cw := s.variant(fmt.Sprintf("cpuwork@%.0f%%", l*100))
		sp := s.variant(fmt.Sprintf("cpuwork-sparep@%.0f%%", l*100))
		if base.Latency.P99 > 0 {
			for _, v := range []*Variant{base, cw, sp} {
				v.Ratio = ratiosTo(v, base)
			}
		}
	}
	n, c := s.variant("naive@95%"), s.variant("cpuwork@95%")
	if n.Valid && c.Valid {
		ratio := c.medianP99() / n.medianP99()
		holds := ratio <= 0.5 && c.Extra["shed_share"] < 0.01
		reps := min(len(c.Repeats), len(n.Repeats))
		k := agreement(reps, func(i int) bool {
			return c.Repeats[i].P99/n.Repeats[i].P99 <= 0.5 && c.Repeats[i].Extra["shed_share"] < 0.01
		})
		s.Verdict = fmt.Sprintf("at 95%% of capacity, cpuwork p99 of served requests %s = %.2fx naive (%s; expected <= 0.5x; medians of the repeats), small p99 %s vs %s, %.1f%% shed (expected < 1%%): %s in %d/%d repeats",
			ms(c.medianP99()), ratio, ms(n.medianP99()), ms(c.Extra["small_p99_s"]), ms(n.Extra["small_p99_s"]), 100*c.Extra["shed_share"], holdsWord(holds), k, reps)
		// Overload: the excess is shed and the served requests keep their
		// latency (issue: at 110 % and 150 %, p99 <= 2x the p99 at 80 %).
		if c80 := s.variant("cpuwork@80%"); c80.Valid {
			for _, l := range []string{"110%", "150%"} {
				cv, nv := s.variant("cpuwork@"+l), s.variant("naive@"+l)
				if !cv.Valid || !nv.Valid {
					continue
				}
				ok := cv.medianP99() <= 2*c80.medianP99() && cv.Extra["shed"] > 0
				reps := min(len(cv.Repeats), len(c80.Repeats))
				k := agreement(reps, func(i int) bool {
					return cv.Repeats[i].P99 <= 2*c80.Repeats[i].P99 && cv.Repeats[i].Extra["shed_share"] > 0
				})
				holds = holds && ok
				s.Verdict += fmt.Sprintf("; at %s, cpuwork sheds %.0f%% and serves p99 %s (expected <= 2x its p99 at 80%%, %s), goodput %.0f%% of offered; naive serves all at p99 %s: %s in %d/%d repeats",
					l, 100*cv.Extra["shed_share"], ms(cv.medianP99()), ms(c80.medianP99()), 100*cv.Extra["goodput_of_offered"], ms(nv.medianP99()), holdsWord(ok), k, reps)
			}
		}
		s.Holds = boolp(holds)
		if sp := s.variant("cpuwork-sparep@95%"); sp.Valid {
			r2 := sp.medianP99() / n.medianP99()
			s.Verdict += fmt.Sprintf("; with SpareP (GOMAXPROCS = Slots = budget+1) p99 %s = %.2fx, small p99 %s: %s",
				ms(sp.medianP99()), r2, ms(sp.Extra["small_p99_s"]), holdsWord(r2 <= 0.5))
		}
	}
	return s, nil
}

func (r *Runner) serviceOnce(v *Variant, variant string, small, large workload.Workload, rate float64, loadgen []string) error {
	var e *cpuwork.Executor
	if variant != "naive" {
		slots := r.slots
		if variant == "cpuwork-sparep" {
			slots++
			runtime.GOMAXPROCS(slots)
			defer runtime.SetDefaultGOMAXPROCS()
		}
		var err error
		var mqw [cpuwork.NumClasses]time.Duration
		mqw[cpuwork.Interactive], mqw[cpuwork.Batch] = 10*time.Millisecond, 50*time.Millisecond
		e, err = cpuwork.New(cpuwork.Options{Slots: slots, WatchInterval: -1, SpareP: variant == "cpuwork-sparep",
			Demotion: cpuwork.DemoteWithSpareP, MaxQueueWait: mqw,
			QueueLimit: [cpuwork.NumClasses]int{cpuwork.Interactive: 256, cpuwork.Batch: 64}})
		if err != nil {
			return err
		}
		defer e.Close(context.Background())
	}
	var item sync.Mutex
	n := 0
	next := func() int { item.Lock(); defer item.Unlock(); n++; return n }
	handler := func(w workload.Workload, class cpuwork.Class) http.HandlerFunc {
		return func(rw http.ResponseWriter, req *http.Request) {
			i := next()
			var err error
			if e == nil {
				err = w.Run(i)
			} else {
				err = e.Do(req.Context(), class, func(context.Context) error { return w.Run(i) })
			}
			respond(rw, err)
		}
	}
	mux := http.NewServeMux()
	mux.Handle("/small", handler(small, cpuwork.Interactive))
	mux.Handle("/large", handler(large, cpuwork.Batch))
	return r.loadOnce(v, "service", mux, rate, loadgen)
}

// loadOnce serves h on loopback, drives it with the load generator process
// at rate requests/s for the run's duration (extra: the generator's extra
// flags), and records what it saw in v: latency from each request's
// intended send time for the 200s, 503s counted as shed, other codes as
// errors, per kind ("small", "large") and overall.
func (r *Runner) loadOnce(v *Variant, scenario string, h http.Handler, rate float64, loadgen []string, extra ...string) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("%s: listen on loopback: %w", scenario, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	return r.loadAt(v, scenario, ln.Addr().String(), rate, loadgen, extra...)
}

// loadAt is loadOnce against a server already listening at addr (in this
// process or another); the CPU it reports is this process's.
func (r *Runner) loadAt(v *Variant, scenario, addr string, rate float64, loadgen []string, extra ...string) error {
	rate = wholeRate(rate) // what the pacer sends is what is offered
	m := startMeter()
	d := min(r.duration, 2*time.Second) // 12 variants: keep the suite within its 5 minutes
	args := append(append([]string{}, loadgen[1:]...), "--target", "http://"+addr,
		"--rate", strconv.FormatFloat(rate, 'f', 3, 64), "--duration", d.String())
	args = append(args, extra...)
	cmd := exec.Command(loadgen[0], args...)
	cmd.Stderr = os.Stderr
	if r.loadgenGroup != nil {
		// The generator in a cgroup of its own with a fixed weight: the
		// same CPU conditions for every variant, whatever the server does.
		c, done, err := inGroup(loadgen[0], r.loadgenGroup, args...)
		if err != nil {
			return err
		}
		defer done()
		cmd = c
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: start load generator: %w", scenario, err)
	}
	var results []LoadResult
	dec := json.NewDecoder(out)
	for {
		var lr LoadResult
		if err := dec.Decode(&lr); err != nil {
			if err != io.EOF {
				cmd.Process.Kill()
				cmd.Wait()
				return fmt.Errorf("%s: read load results: %w", scenario, err)
			}
			break
		}
		results = append(results, lr)
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("%s: load generator: %w", scenario, err)
	}
	u := m.stop()
	if len(results) == 0 {
		return fmt.Errorf("%s: load generator returned no results", scenario)
	}
	// Intended send time of hit Seq under vegeta's constant pacer is
	// began + (Seq+1)*interval; began is estimated from the least-delayed hit.
	interval := time.Duration(float64(time.Second) / float64(int(rate)))
	began := results[0].Timestamp
	for _, lr := range results {
		if t := lr.Timestamp.Add(-time.Duration(lr.Seq+1) * interval); t.Before(began) {
			began = t
		}
	}
	rec := newRecorder(began, len(results))
	all, kinds := rec.shard(), map[string]*histT{"small": newHist(), "large": newHist()}
	shed, errs, ok := 0, 0, 0
	var last time.Time
	for _, lr := range results {
		intended := began.Add(time.Duration(lr.Seq+1) * interval)
		end := lr.Timestamp.Add(time.Duration(lr.LatencyNS))
		lat := end.Sub(intended)
		switch {
		case lr.Code == http.StatusServiceUnavailable:
			shed++
			continue // shed requests are counted, never in the latency percentiles
		case lr.Code != http.StatusOK:
			errs++
			continue
		}
		ok++
		rec.record(all, end, lat)
		kinds[lr.Kind].RecordValue(max(int64(lat/time.Microsecond), 1))
		if end.After(last) {
			last = end
		}
	}
	v.addRun(rec.merged(), rec.series, u)
	v.setRepeatExtra("shed_share", float64(shed)/float64(max(len(results), 1)))
	v.setRepeatExtra("served", float64(ok))
	v.OfferedPS += rate / float64(r.rounds)
	v.AchievedPS += float64(len(results)) / d.Seconds() / float64(r.rounds) // sent by the generator
	v.setExtra("goodput_per_s", v.Extra["goodput_per_s"]+float64(ok)/d.Seconds()/float64(r.rounds))
	v.setExtra("sent", v.Extra["sent"]+float64(len(results)))
	v.Throughput = v.Extra["goodput_per_s"]
	for k, h := range kinds {
		l := latencyOf(h)
		v.setExtra(k+"_p50_s", l.P50)
		v.setExtra(k+"_p99_s", l.P99)
		v.setExtra(k+"_p999_s", l.P999)
	}
	v.setExtra("shed", v.Extra["shed"]+float64(shed))
	v.setExtra("errors", v.Extra["errors"]+float64(errs))
	return nil
}

// wholeRate is the request rate the load generator can pace: whole
// requests per second, at least 1.
func wholeRate(rate float64) float64 { return max(math.Floor(rate), 1) }

// atLoads runs every variant at every load level (a fraction of capacity),
// r.rounds times in a shuffled order, as variants named "variant@N%", then
// derives each one's goodput and shed share and marks it invalid when its
// responses had errors or the generator sent less than 99 % of the offered
// rate.
func (r *Runner) atLoads(s *Scenario, variants []struct{ name, desc string }, loads []float64, once func(v *Variant, variant string, load float64) error) {
	for _, pv := range variants {
		for _, l := range loads {
			s.Variants = append(s.Variants, &Variant{Name: fmt.Sprintf("%s@%.0f%%", pv.name, l*100), Description: pv.desc, Valid: true})
		}
	}
	for round := 0; round < r.rounds; round++ {
		for _, l := range loads {
			for _, pv := range r.shuffledNames(variants) {
				v := s.variant(fmt.Sprintf("%s@%.0f%%", pv.name, l*100))
				r.step(fmt.Sprintf("%s: %s (repeat %d/%d)", s.Name, v.Name, round+1, r.rounds))
				if err := once(v, pv.name, l); err != nil {
					v.Valid, v.Invalid = false, err.Error()
				}
			}
		}
	}
	for _, v := range s.Variants {
		if v.OfferedPS > 0 {
			v.setExtra("goodput_of_offered", v.Extra["goodput_per_s"]/v.OfferedPS)
			v.setExtra("shed_share", v.Extra["shed"]/max(v.Extra["sent"], 1))
		}
		if v.Valid && v.Extra["errors"] > 0 {
			v.Valid, v.Invalid = false, fmt.Sprintf("%.0f responses were errors", v.Extra["errors"])
		}
		if v.Valid && v.OfferedPS > 0 && v.AchievedPS < 0.99*v.OfferedPS {
			v.Valid, v.Invalid = false, fmt.Sprintf("load generator sent %.1f/s of %.1f/s offered", v.AchievedPS, v.OfferedPS)
		}
	}
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
