//go:build linux

package schedstat

import (
	"encoding/json"
	"net/http/httptest"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Three threads pinned to one CPU and spinning for 300 ms: each runs about
// a third of the time, so the others wait. ReadThreads must see that wait
// as run delay (at least 100 ms in all) and the spinning as on-CPU time.
// The CPU may be shared with other processes meanwhile (the tests of other
// packages, run at once): what holds whatever they take is that the three
// threads were runnable the whole time, so at every instant one of them
// ran or all waited: their on-CPU time and run delay add up to at least
// the 300 ms (250 ms, for the threads' start), and they ran.
func TestRunDelayShowsThreadsWaitingForACPU(t *testing.T) {
	before, err := ReadThreads(0)
	if err != nil {
		t.Skip(err)
	}
	var wg sync.WaitGroup
	var stop atomic.Bool
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var set unix.CPUSet
			set.Set(0)
			if err := unix.SchedSetaffinity(0, &set); err != nil {
				t.Error(err)
				return
			}
			for !stop.Load() {
			}
			var all unix.CPUSet
			for c := range runtime.NumCPU() {
				all.Set(c)
			}
			unix.SchedSetaffinity(0, &all)
		}()
	}
	time.Sleep(300 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	after, err := ReadThreads(0)
	if err != nil {
		t.Fatal(err)
	}
	d := after.Sub(before)
	t.Logf("on-CPU %v, run delay %v over %d threads", d.OnCPU, d.RunDelay, d.Count)
	if d.RunDelay < 100*time.Millisecond {
		t.Errorf("run delay %v: three threads sharing one CPU for 300 ms must wait >= 100 ms", d.RunDelay)
	}
	if d.OnCPU < 10*time.Millisecond {
		t.Errorf("on-CPU %v: three spinning threads on one CPU for 300 ms must be seen running", d.OnCPU)
	}
	if d.OnCPU+d.RunDelay < 250*time.Millisecond {
		t.Errorf("on-CPU %v + run delay %v: three threads runnable for 300 ms must add up to >= 250 ms", d.OnCPU, d.RunDelay)
	}
}

func TestQuantilesAreUpperBoundsOfTheBucket(t *testing.T) {
	b := []float64{0, 0.001, 0.002, 0.005, 0.01}
	q := quantiles(b, []uint64{50, 48, 1, 1})
	if q.Count != 100 || q.P50 != time.Millisecond || q.P99 != 5*time.Millisecond || q.Max != 10*time.Millisecond {
		t.Errorf("got %+v", q)
	}
	if q := quantiles(b, make([]uint64, 4)); q != (Quantiles{}) {
		t.Errorf("empty: %+v", q)
	}
}

func TestSamplerServesTimerLatenessAndSchedulingLatency(t *testing.T) {
	// A 1 ms canary: about 100 wake-ups per interval. The runtime tracks
	// the scheduling latency of one goroutine transition in 8
	// (gTrackingPeriod in runtime/proc.go), so a few wake-ups may record none.
	s, err := Start(Options{Interval: 100 * time.Millisecond, TimerCanary: true, CanaryPeriod: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	deadline := time.Now().Add(5 * time.Second)
	for s.Last().TimerLateness.Count < 50 {
		if time.Now().After(deadline) {
			t.Fatal("no sample with 50 canary wake-ups within 5 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	rec := httptest.NewRecorder()
	Handler(s, func() any { return map[string]int{"slots": 2} }).ServeHTTP(rec, httptest.NewRequest("GET", "/debug/cpuwork", nil))
	var rep struct {
		Sample   Sample         `json:"sample"`
		Executor map[string]int `json:"executor"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Sample.GOMAXPROCS != runtime.GOMAXPROCS(0) || rep.Executor["slots"] != 2 || rep.Sample.Interval <= 0 {
		t.Errorf("served %+v", rep)
	}
	if rep.Sample.SchedLatency.Count == 0 {
		t.Errorf("no scheduling latency recorded in an interval with %d canary wake-ups", rep.Sample.TimerLateness.Count)
	}
	if _, err := Start(Options{Interval: time.Millisecond}); err == nil {
		t.Error("a 1 ms interval was accepted")
	}
}

// BenchmarkSample is the cost of one sample (runtime/metrics, getrusage,
// /proc/self/task/*/schedstat, the budget and cpu.stat): at a 1 s interval
// the sampler costs this much CPU per second.
func BenchmarkSample(b *testing.B) {
	prev := read()
	for b.Loop() {
		cur := read()
		_ = delta(prev, cur)
		prev = cur
	}
}

// A canary whose goroutine has not run yet (on Ps busy with a hundred
// runnable goroutines a new goroutine can wait a whole interval) reports its
// first sleep as overdue: the doctor's timer-starvation test saw an interval
// with no canary wake-up and no lateness at all (in CI).
func TestAnUnstartedCanaryIsOverdue(t *testing.T) {
	c := newCanary(time.Millisecond)
	time.Sleep(5 * time.Millisecond)
	q := c.take()
	if q.Count != 1 || q.Max < 2*time.Millisecond {
		t.Errorf("a canary that never ran, 5 ms after arming a 1 ms sleep: %+v, want one late wake-up of at least 2 ms", q)
	}
}

// A take during the canary's wake-up sees the wake-up: recorded, or
// overdue. The canary once cleared its due time before recording, and a
// take in between — likely on Ps with a hundred runnable goroutines,
// where the canary can be preempted anywhere — reported an interval with
// no lateness at all (a doctor test failed so in CI).
func TestATakeDuringAWakeUpSeesIt(t *testing.T) {
	c := newCanary(time.Millisecond)
	got := make(chan Quantiles, 1)
	c.between = func() {
		go func() { got <- c.take() }()
		time.Sleep(20 * time.Millisecond) // the take runs now, if it can
	}
	want := time.Now().Add(-5 * time.Millisecond) // the sleep woke 5 ms late
	c.woke(want, time.Hour)
	q := <-got
	if q.Count != 1 || q.Max < 2*time.Millisecond {
		t.Errorf("a take during a wake-up 5 ms late: %+v, want that wake-up", q)
	}
}
