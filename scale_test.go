package cpuwork

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
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
// under it and reports whether it waited for a slot (cpuwork's Do does not
// say: waited reports the share of its queued tasks instead, from the
// queue-wait histogram, an estimate from its timed tasks).
type scaleBound struct {
	name   string
	run    func(ctx context.Context, task func(context.Context) error) (waited bool)
	waited func() (share float64, ok bool)
}

// scaleBounds returns the executor (Interactive tasks) and the two
// reference bounds, each of slots.
func scaleBounds(b *testing.B, slots int) []scaleBound {
	e := newExec(b, Options{Slots: slots})
	ch := make(chan struct{}, slots)
	xs := semaphore.NewWeighted(int64(slots))
	h := &e.stats[Interactive].queueWait
	return []scaleBound{
		{"cpuwork", func(ctx context.Context, task func(context.Context) error) bool {
			e.Do(ctx, Interactive, task)
			return false
		}, func() (float64, bool) {
			var total uint64
			for i := range h.counts {
				total += h.counts[i].Load()
			}
			if total == 0 {
				return 0, false
			}
			return 1 - float64(h.counts[0].Load())/float64(total), true
		}},
		{"chan", func(ctx context.Context, task func(context.Context) error) bool {
			waited := false
			select {
			case ch <- struct{}{}:
			default:
				waited = true
				ch <- struct{}{}
			}
			task(ctx)
			<-ch
			return waited
		}, nil},
		{"xsync", func(ctx context.Context, task func(context.Context) error) bool {
			waited := !xs.TryAcquire(1)
			if !waited || xs.Acquire(ctx, 1) == nil {
				task(ctx)
				xs.Release(1)
			}
			return waited
		}, nil},
	}
}

// scaleRun runs rounds of tasks from submitters goroutines under each
// bound, alternated, and reports ns per task of each, the share of tasks
// that waited for a slot, and the executor's time over the others'. A
// round runs scaleTasks(d) tasks per bound; with sustain > 0, each
// submitter runs tasks for sustain instead, long enough for the Go
// scheduler to preempt submitters that hold a slot (every 10 ms): what
// sustained saturation looks like, where a short round's submitters each
// finish before any is preempted and none waits.
func scaleRun(b *testing.B, slots, submitters int, d, sustain time.Duration, task func(context.Context) error) {
	bounds := scaleBounds(b, slots)
	perSubmitter := scaleTasks(d) / submitters
	total := make([]time.Duration, len(bounds))
	tasks := make([]int64, len(bounds))
	waits := make([]int64, len(bounds))
	ctx := context.Background()
	round := 0
	for b.Loop() {
		for k := range bounds {
			i := (k + round) % len(bounds) // each bound goes first in turn
			var wg sync.WaitGroup
			var n, w atomic.Int64
			start := time.Now()
			stop := start.Add(sustain)
			for range submitters {
				wg.Go(func() {
					var mine, waited int64
					for j := 0; ; j++ {
						if sustain > 0 {
							if j&255 == 0 && time.Now().After(stop) {
								break
							}
						} else if j == perSubmitter {
							break
						}
						if bounds[i].run(ctx, task) {
							waited++
						}
						mine++
					}
					n.Add(mine)
					w.Add(waited)
				})
			}
			wg.Wait()
			total[i] += time.Since(start)
			tasks[i] += n.Load()
			waits[i] += w.Load()
		}
		round++
	}
	per := func(i int) float64 { return float64(total[i]) / float64(tasks[i]) }
	for i, bd := range bounds {
		b.ReportMetric(per(i), bd.name+"-ns/task")
		share, ok := float64(waits[i])/float64(tasks[i]), true
		if bd.waited != nil {
			share, ok = bd.waited()
		}
		if ok {
			b.ReportMetric(100*share, bd.name+"-%waited")
		}
	}
	b.ReportMetric(per(0)/per(1), "cpuwork/chan")
	b.ReportMetric(per(0)/per(2), "cpuwork/xsync")
}

// BenchmarkScaleFree: every submitter finds a free slot (slots =
// submitters = GOMAXPROCS), empty tasks: the fast path on every core.
func BenchmarkScaleFree(b *testing.B) {
	p := runtime.GOMAXPROCS(0)
	scaleRun(b, p, p, 0, 0, emptyTask)
}

// BenchmarkScaleSaturated: 2 slots, 4xGOMAXPROCS submitters, empty
// tasks, sustained for 100 ms per round: the queued path, at its most
// frequent.
func BenchmarkScaleSaturated(b *testing.B) {
	scaleRun(b, 2, 4*runtime.GOMAXPROCS(0), 0, 100*time.Millisecond, emptyTask)
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
			scaleRun(b, p, 4*p, d, 0, task)
		})
	}
}
