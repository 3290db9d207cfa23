package loadreport

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/cpuwork/cpuwork"
)

func TestComputeFromTwoSamples(t *testing.T) {
	a := sample{at: time.Second, completed: 100, refused: 10, slotSeconds: 1, cpuSec: 2, slots: 2}
	b := sample{at: 2 * time.Second, completed: 300, refused: 30, slotSeconds: 2.5, cpuSec: 2.75, slots: 2, queued: 20}
	var mean float64
	got := compute(a, b, 100*time.Millisecond, 1.5, &mean)
	// 200 tasks in 1 s, 20 refused; 1.5 slot-s of 2 held (0.75), and 20
	// queued of 7.5 ms each on 2 slots: 75 ms, 0.75 of the objective.
	want := Report{Utilization: 0.75 + 0.75, CPUUtilization: 0.5, RPS: 200, EPS: 20}
	for _, c := range []struct {
		name      string
		got, want float64
	}{{"utilization", got.Utilization, want.Utilization}, {"cpu", got.CPUUtilization, want.CPUUtilization}, {"rps", got.RPS, want.RPS}, {"eps", got.EPS, want.EPS}} {
		if math.Abs(c.got-c.want) > 1e-9 {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	// Without an objective the queue is not counted; the busy share is at
	// most 1 (slot time is charged when a task ends, so a window can
	// collect more than its length).
	b.slotSeconds = 9
	if got := compute(a, b, 0, 1.5, &mean); got.Utilization != 1 {
		t.Errorf("utilization without an objective = %v, want 1", got.Utilization)
	}
	// Counters that went backwards (a new executor) and a zero window
	// report nothing negative.
	if got := compute(b, a, time.Second, 1.5, &mean); got.RPS < 0 || got.EPS < 0 || got.Utilization < 0 || got.CPUUtilization < 0 {
		t.Errorf("backwards: %+v", got)
	}
	if got := compute(a, a, time.Second, 1.5, &mean); got != (Report{}) {
		t.Errorf("zero window: %+v", got)
	}
}

func TestHeaderIsEnvoysTextFormat(t *testing.T) {
	got := Report{Utilization: 1.25, CPUUtilization: 0.5, RPS: 120.5, EPS: 3}.Header()
	want := "TEXT application_utilization=1.25, cpu_utilization=0.5, rps_fractional=120.5, eps=3"
	if got != want {
		t.Errorf("Header() = %q, want %q", got, want)
	}
}

// A saturated executor reports its slots busy, and a standing queue
// reports past 1 by the objectives of work it holds.
func TestASaturatedExecutorReportsItsQueue(t *testing.T) {
	e, err := cpuwork.New(cpuwork.Options{Slots: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	r := New(e, 10*time.Millisecond)
	if got := r.Report(); got != (Report{}) {
		t.Errorf("a report before two samples: %+v", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 8 { // 2 running, 6 queued, each task 2 ms: 6 ms of queue per slot
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				e.Do(context.Background(), cpuwork.Batch, func(context.Context) error {
					time.Sleep(2 * time.Millisecond)
					return nil
				})
			}
		}()
	}
	var got Report
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		if got = r.Report(); got.RPS > 0 && got.Utilization > 1.2 {
			break
		}
	}
	cancel()
	wg.Wait()
	if got.RPS <= 0 || got.Utilization <= 1.2 {
		t.Errorf("saturated with 6 queued: %+v, want RPS > 0 and utilization > 1.2 (about 1.6)", got)
	}
}
