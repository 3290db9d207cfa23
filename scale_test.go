package cpuwork

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/semaphore"
)

// The scale benchmarks compare the executor's admission with the two
// bounds a team would write instead — a buffered-channel semaphore and
// golang.org/x/sync/semaphore — in the same run: each b.N is one round in
// which every bound runs the same tasks from the same submitters, one
// after another, and the benchmark reports each bound's time per task
// and the ratios of the executor's to theirs over all rounds (ratio <= 1:
// the executor is as fast). Run them on the machine to judge, alone:
//
//	go test -run '^$' -bench Scale -benchtime 20x .
//
// docs/performance.md gives the ratios they must meet and the model of
// when one admission lock saturates.

// scaleTasks is how many tasks one round runs per bound: 40,000, or
// fewer for long tasks, so that a round holds about 0.4 s of work per
// core.
func scaleTasks(d time.Duration) int {
	if d <= 0 {
		return 40_000
	}
	return min(40_000, int(400*time.Millisecond/d)*runtime.GOMAXPROCS(0))
}

// scaleBound is one way to bound the tasks' concurrency: run runs task
// under it.
type scaleBound struct {
	name string
	run  func(ctx context.Context, task func(context.Context) error)
}

// scaleBounds returns the executor (Interactive tasks) and the two
// reference bounds, each of slots.
func scaleBounds(b *testing.B, slots int) []scaleBound {
	e := newExec(b, Options{Slots: slots})
	ch := make(chan struct{}, slots)
	xs := semaphore.NewWeighted(int64(slots))
	return []scaleBound{
		{"cpuwork", func(ctx context.Context, task func(context.Context) error) { e.Do(ctx, Interactive, task) }},
		{"chan", func(ctx context.Context, task func(context.Context) error) {
			ch <- struct{}{}
			task(ctx)
			<-ch
		}},
		{"xsync", func(ctx context.Context, task func(context.Context) error) {
			if xs.Acquire(ctx, 1) == nil {
				task(ctx)
				xs.Release(1)
			}
		}},
	}
}

// scaleRun runs rounds of scaleTasks tasks from submitters goroutines
// under each bound, alternated, and reports ns per task of each and the
// executor's time over the others'.
func scaleRun(b *testing.B, slots, submitters int, d time.Duration, task func(context.Context) error) {
	bounds := scaleBounds(b, slots)
	perSubmitter := scaleTasks(d) / submitters
	total := make([]time.Duration, len(bounds))
	ctx := context.Background()
	round := 0
	for b.Loop() {
		for k := range bounds {
			i := (k + round) % len(bounds) // each bound goes first in turn
			var wg sync.WaitGroup
			start := time.Now()
			for range submitters {
				wg.Go(func() {
					for range perSubmitter {
						bounds[i].run(ctx, task)
					}
				})
			}
			wg.Wait()
			total[i] += time.Since(start)
		}
		round++
	}
	per := func(i int) float64 { return float64(total[i]) / float64(round*perSubmitter*submitters) }
	for i, bd := range bounds {
		b.ReportMetric(per(i), bd.name+"-ns/task")
	}
	b.ReportMetric(per(0)/per(1), "cpuwork/chan")
	b.ReportMetric(per(0)/per(2), "cpuwork/xsync")
}

// BenchmarkScaleFree: every submitter finds a free slot (slots =
// submitters = GOMAXPROCS), empty tasks: the fast path on every core.
func BenchmarkScaleFree(b *testing.B) {
	p := runtime.GOMAXPROCS(0)
	scaleRun(b, p, p, 0, emptyTask)
}

// BenchmarkScaleSaturated: 2 slots, 4xGOMAXPROCS submitters, empty
// tasks: the queued path, at its most frequent.
func BenchmarkScaleSaturated(b *testing.B) {
	scaleRun(b, 2, 4*runtime.GOMAXPROCS(0), 0, emptyTask)
}

// BenchmarkScaleTask: slots = GOMAXPROCS, 4xGOMAXPROCS submitters, tasks
// that spin 1 µs to 1 ms: the share of the cores the admission leaves to
// the tasks (cpuwork/chan is the channel's efficiency over the
// executor's).
func BenchmarkScaleTask(b *testing.B) {
	p := runtime.GOMAXPROCS(0)
	for _, d := range []time.Duration{time.Microsecond, 10 * time.Microsecond, 100 * time.Microsecond, time.Millisecond} {
		task := func(context.Context) error { spin(d); return nil }
		b.Run(fmt.Sprint(d), func(b *testing.B) {
			scaleRun(b, p, 4*p, d, task)
		})
	}
}
