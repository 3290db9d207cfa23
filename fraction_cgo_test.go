//go:build linux && cgo

package cpuwork

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cpuwork/cpuwork/internal/cspin"
)

// cgoQuotaChild runs in a 1.5-CPU cgroup at GOMAXPROCS 1 (automaxprocs'
// choice for 1.5 CPUs): four clients submit 5 ms calls into C, which
// cannot give a slot back before they return, for 5 s; mode cgo-sem runs
// them behind a 2-worker semaphore, cgo-1s and cgo-20ms through Do with a
// 1 s or 20 ms latency target. It prints the cores used and the pacer's
// state over the last 2.5 s (after the executor saw the tasks run outside
// Go's Ps and the pacer learned the objective).
func cgoQuotaChild(mode string) {
	const call = 5 * time.Millisecond
	t0 := time.Now()
	stop, from := t0.Add(5*time.Second), t0.Add(2500*time.Millisecond)
	var e *Executor
	sem := make(chan struct{}, 2)
	target := time.Second
	if strings.HasPrefix(mode, "ol-") {
		openLoopChild(mode)
		return
	}
	switch mode {
	case "cgo-sem":
	case "cgo-1s", "cgo-20ms":
		if mode == "cgo-20ms" {
			target = 20 * time.Millisecond
		}
		var err error
		if e, err = New(Options{}); err != nil {
			fmt.Println(`{"err":"` + err.Error() + `"}`)
			os.Exit(1)
		}
	default:
		fmt.Println(`{"err":"unknown mode"}`)
		os.Exit(1)
	}
	var wg sync.WaitGroup
	var done, refused atomic.Int64
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				if e == nil {
					sem <- struct{}{}
					sinkU.Store(cspin.Spin(call))
					<-sem
					done.Add(1)
					continue
				}
				ctx := WithTarget(context.Background(), Target{Latency: target, Service: call})
				err := e.Do(ctx, Interactive, func(context.Context) error { sinkU.Store(cspin.Spin(call)); return nil })
				if err != nil {
					refused.Add(1)
					time.Sleep(call) // a refused client comes back later
					continue
				}
				done.Add(1)
			}
		}()
	}
	time.Sleep(time.Until(from))
	cpu0, closed0 := processCPU(), time.Duration(0)
	if e != nil {
		closed0 = e.Stats().Pacing.Closed
	}
	wg.Wait()
	res := map[string]any{"cores": (processCPU() - cpu0).Seconds() / time.Since(from).Seconds(), "done": done.Load(), "refused": refused.Load()}
	if e != nil {
		p := e.Stats().Pacing
		res["slots"], res["paced"], res["absorbed"] = e.slotsNow(), p.Paced, p.Absorbed
		res["closed_s"] = (p.Closed - closed0).Seconds()
		res["objective_ms"], res["pause_ms"] = float64(p.Objective)/1e6, float64(p.Pause)/1e6
		e.Close(context.Background())
	}
	out, _ := json.Marshal(res)
	fmt.Println(string(out))
}

// TestTheObjectiveDecidesThePacingOfCgoCallsInARealCgroup: at GOMAXPROCS
// 1 in a real 1.5-CPU cgroup, calls into C that cannot give a slot back
// run on ceil(1.5) = 2 slots. A throttled period's pause there is 25 ms
// (two threads spend the 150 ms of quota in 75 ms of each 100 ms period):
// a 1 s target absorbs it, so the extra slot is never closed and the
// quota is used whole, the kernel throttling — as a 2-worker semaphore
// does; a 20 ms target does not (a pause longer than the objective), so
// the pacer keeps closing the extra slot. The cores each uses are logged
// beside the semaphore's, not judged (a timed ratio on a shared machine is
// a benchmark's: docs/results.md has the alternated runs).
func TestTheObjectiveDecidesThePacingOfCgoCallsInARealCgroup(t *testing.T) {
	type result struct {
		Cores       float64
		Done        int64
		Refused     int64
		Slots       int
		Paced       bool
		Absorbed    bool
		ClosedS     float64 `json:"closed_s"`
		ObjectiveMs float64 `json:"objective_ms"`
		PauseMs     float64 `json:"pause_ms"`
	}
	run := func(mode string) (r result) {
		out, periods, throttled, _ := runInQuota(t, 1.5, mode, "GOMAXPROCS=1")
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatalf("%s: child output %q: %v", mode, out, err)
		}
		t.Logf("%s: %+v; %d of %d periods throttled", mode, r, throttled, periods)
		return r
	}
	sem, loose, tight := run("cgo-sem"), run("cgo-1s"), run("cgo-20ms")
	t.Logf("cores over the semaphore's: 1 s target %.2fx, 20 ms target %.2fx", loose.Cores/sem.Cores, tight.Cores/sem.Cores)
	if sem.Cores < 1.4 {
		// The pacer closes the extra slot only when the period's quota is
		// on pace to be used: on a host whose other work leaves the
		// children under the quota (a 2-worker semaphore used 1.14 cores
		// of 1.5 beside CI's race-enabled packages), nothing needs pacing.
		t.Skipf("the host gave a 2-worker semaphore %.2f cores of the 1.5-CPU quota: too busy for the quota to bind", sem.Cores)
	}
	if loose.Slots != 2 || !loose.Paced || !loose.Absorbed || loose.ClosedS > 0.05 {
		t.Errorf("1 s target: %d slots, paced %v, absorbed %v, extra slot closed %.3f s of the last 2.5 s; want 2 slots with a fractional quota whose pause the objective absorbs, never closed",
			loose.Slots, loose.Paced, loose.Absorbed, loose.ClosedS)
	}
	if loose.PauseMs < 20 || loose.PauseMs > 30 || loose.ObjectiveMs != 1000 {
		t.Errorf("1 s target: pause %.1f ms, objective %.1f ms; want 25 ms (1.5 CPUs on 2 slots, a 100 ms period) and 1000 ms", loose.PauseMs, loose.ObjectiveMs)
	}
	if tight.Absorbed || tight.ClosedS <= 0 || tight.ObjectiveMs != 20 {
		t.Errorf("20 ms target: absorbed %v, extra slot closed %.3f s, objective %.1f ms; want paced (a 25 ms pause costs a 20 ms objective): closed some of the time", tight.Absorbed, tight.ClosedS, tight.ObjectiveMs)
	}
}

// BenchmarkCgoCallsUnderAFractionalQuota runs b.N pairs, in alternated
// order, of the 2-worker semaphore and Do with a 1 s target (cgo-sem,
// cgo-1s) at GOMAXPROCS 1 in a 1.5-CPU cgroup, and reports the cores each
// used over its last 2.5 s and their ratio per pair (geometric mean):
// go test -run '^$' -bench CgoCallsUnderAFractionalQuota -benchtime 8x.
func BenchmarkCgoCallsUnderAFractionalQuota(b *testing.B) {
	alternatedPairs(b, "cgo-1s", "cgo-sem", "cores", "cores-ratio")
}

// alternatedPairs runs b.N pairs of the children judged and alt (modes
// of cgoQuotaChild) in alternated order, each at GOMAXPROCS 1 in a
// 1.5-CPU cgroup, reads the figure key from each one's JSON line, logs
// every child and pair, and reports the per-pair ratio judged/alt as
// metric (geometric mean) and each side's mean.
func alternatedPairs(b *testing.B, judged, alt, key, metric string, env ...string) {
	var logSum float64
	sum := map[string]float64{}
	for i := range b.N {
		modes := []string{judged, alt}
		if i%2 == 1 {
			modes[0], modes[1] = alt, judged
		}
		v := map[string]float64{}
		for _, m := range modes {
			if len(env) == 0 {
				env = []string{"GOMAXPROCS=1"}
			}
			out, periods, throttled, _ := runInQuotaB(b, 1.5, m, env...)
			var r map[string]any
			if err := json.Unmarshal(out, &r); err != nil {
				b.Fatalf("%s: %q: %v", m, out, err)
			}
			x, ok := r[key].(float64)
			if !ok {
				b.Fatalf("%s: %q has no %s", m, out, key)
			}
			v[m] = x
			sum[m] += x
			b.Logf("pair %d %s: %s (%d of %d periods throttled)", i+1, m, out, throttled, periods)
		}
		logSum += math.Log(v[judged] / v[alt])
		b.Logf("pair %d: %s %.3f (%s) / %.3f (%s) = %.3fx", i+1, key, v[judged], judged, v[alt], alt, v[judged]/v[alt])
	}
	b.ReportMetric(math.Exp(logSum/float64(b.N)), metric)
	b.ReportMetric(sum[judged]/float64(b.N), judged+"-"+key)
	b.ReportMetric(sum[alt]/float64(b.N), alt+"-"+key)
}

// openLoopChild offers calls open-loop (exponential inter-arrival times)
// at LOAD % (80 if not given) of a 1.5-CPU quota for 5 s and prints the p50 and p99 of the
// calls' latency from arrival over the last 2.5 s, the calls served
// within the target and refused, and the pacer's state. Its mode is ol-KIND-CALL-TARGET-PACE[-LOAD]: KIND cgo (a
// call into C, which cannot give its slot back before it returns) or go
// (a Go loop calling Checkpoint every 50 µs of its CPU), CALL the CPU
// time of a call and TARGET its latency target in milliseconds, PACE
// paced (QuotaStrict: the extra slot kept under the quota whatever the
// objective), open (Slots 2: never paced, the kernel throttles) or rule
// (the default: paced where throttle.Costs says the pause costs TARGET).
func openLoopChild(mode string) {
	var kind, pace string
	var callMs, targetMs float64
	load := 80.0
	f := strings.Split(mode, "-")
	if len(f) == 6 {
		load, _ = strconv.ParseFloat(f[5], 64)
		f = f[:5]
	}
	if len(f) == 5 {
		kind, pace = f[1], f[4]
		callMs, _ = strconv.ParseFloat(f[2], 64)
		targetMs, _ = strconv.ParseFloat(f[3], 64)
	}
	o := Options{}
	switch pace {
	case "paced":
		o.Quota = QuotaStrict
	case "open":
		o.Slots = 2
	case "rule":
	default:
		fmt.Println(`{"err":"unknown mode"}`)
		os.Exit(1)
	}
	call := time.Duration(callMs * float64(time.Millisecond))
	target := time.Duration(targetMs * float64(time.Millisecond))
	if (kind != "go" && kind != "cgo") || call <= 0 || target <= 0 || load <= 0 {
		fmt.Println(`{"err":"unknown mode"}`)
		os.Exit(1)
	}
	work := func(ctx context.Context) error { sinkU.Store(cspin.Spin(call)); return nil }
	if kind == "go" {
		batches := int(call / (50 * time.Microsecond))
		per := goSpinPer(50 * time.Microsecond)
		work = func(ctx context.Context) error {
			x := uint64(1)
			for range batches {
				for range per {
					x = x*6364136223846793005 + 1442695040888963407
				}
				if err := Checkpoint(ctx); err != nil {
					return err
				}
			}
			sinkU.Store(x)
			return nil
		}
	}
	e, err := New(o)
	if err != nil {
		fmt.Println(`{"err":"` + err.Error() + `"}`)
		os.Exit(1)
	}
	rate := load / 100 * 1.5 / call.Seconds() // calls per second
	rng := rand.New(rand.NewPCG(1, 2))
	t0 := time.Now()
	stop, from := t0.Add(5*time.Second), t0.Add(2500*time.Millisecond)
	var mu sync.Mutex
	var lat []float64
	var refused, within int
	var wg sync.WaitGroup
	next := t0
	for next.Before(stop) {
		next = next.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
		time.Sleep(time.Until(next))
		arrival := next
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := WithTarget(context.Background(), Target{Latency: target, Service: call})
			err := e.Do(ctx, Interactive, work)
			d := time.Since(arrival)
			if arrival.Before(from) {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				refused++
				return
			}
			if d <= target {
				within++
			}
			lat = append(lat, d.Seconds()*1000)
		}()
	}
	wg.Wait()
	p := e.Stats().Pacing
	e.Close(context.Background())
	slices.Sort(lat)
	q := func(f float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(f*float64(len(lat))))]
	}
	out, _ := json.Marshal(map[string]any{"p50_ms": q(0.5), "p99_ms": q(0.99), "served": len(lat), "within": within, "refused": refused, "absorbed": p.Absorbed, "closed_s": p.Closed.Seconds()})
	fmt.Println(string(out))
}

// goSpinPer is how many rounds of the Go loop take d of this thread's
// CPU time, the fastest of five timings (before any load, so that no
// throttle or preemption lengthens it).
func goSpinPer(d time.Duration) int {
	const rounds = 1 << 16
	best := time.Duration(math.MaxInt64)
	for range 5 {
		x, t := uint64(1), time.Now()
		for range rounds {
			x = x*6364136223846793005 + 1442695040888963407
		}
		sinkU.Store(x)
		best = min(best, time.Since(t))
	}
	return max(1, int(float64(rounds)*float64(d)/float64(best)))
}

// BenchmarkPacingUnderATightObjective runs b.N pairs, alternated, of the
// same open-loop load at 80 % of a 1.5-CPU quota, the extra slot paced
// (QuotaStrict) against kept open (Slots 2, the kernel throttling), with
// the same latency target, and reports the p99 of latency from arrival
// under each and their ratio per pair (geometric mean): where pacing wins,
// and at which objective. Calls into C run at GOMAXPROCS 1
// (automaxprocs' choice), Go loops at 2 (Go's). A throttled period's pause
// here is 25 ms (the period less 1.5 CPUs' share of it on 2 cores).
// go test -run '^$' -bench 'PacingUnderATightObjective/go-1ms-25ms' -benchtime 6x -v.
func BenchmarkPacingUnderATightObjective(b *testing.B) {
	for _, c := range []struct {
		kind                   string
		callMs, targetMs, load int
	}{
		{"go", 1, 12, 80}, {"go", 1, 25, 80}, {"go", 1, 50, 80}, {"go", 1, 100, 80},
		{"cgo", 5, 25, 80}, {"cgo", 5, 50, 80}, {"cgo", 5, 100, 80},
		{"go", 1, 25, 95}, {"go", 1, 100, 95}, {"cgo", 5, 25, 95}, {"cgo", 5, 100, 95},
	} {
		name := fmt.Sprintf("%s-%dms-%dms-load%d", c.kind, c.callMs, c.targetMs, c.load)
		b.Run(name, func(b *testing.B) {
			env := "GOMAXPROCS=1"
			if c.kind == "go" {
				env = "GOMAXPROCS=2"
			}
			mode := fmt.Sprintf("ol-%s-%d-%d-%%s-%d", c.kind, c.callMs, c.targetMs, c.load)
			alternatedPairs(b, fmt.Sprintf(mode, "paced"), fmt.Sprintf(mode, "open"), "p99_ms", "p99-ratio", env)
		})
	}
}
