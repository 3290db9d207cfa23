package peers

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/alitto/pond/v2"
	"github.com/cpuwork/cpuwork"
	"github.com/cpuwork/cpuwork/budget"
	"github.com/cpuwork/cpuwork/cmd/cpuwork/internal/workload"
	"github.com/panjf2000/ants/v2"
	"github.com/sourcegraph/conc/pool"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/semaphore"
)

// slots is the concurrency every variant gets: the CPU budget's slot count.
var slots = func() int {
	b, err := budget.Detect()
	if err != nil {
		return runtime.GOMAXPROCS(0)
	}
	return b.Slots()
}()

// runner submits tasks from several producers and waits for all of them.
type runner struct {
	name string
	// setup returns submit (called concurrently by producers) and wait.
	setup func(b *testing.B) (submit func(task func()), wait func())
}

func runners() []runner {
	ctx := context.Background()
	return []runner{
		{"goroutine", func(b *testing.B) (func(func()), func()) {
			var wg sync.WaitGroup
			return func(t func()) { wg.Add(1); go func() { t(); wg.Done() }() }, wg.Wait
		}},
		{"chansem", func(b *testing.B) (func(func()), func()) {
			var wg sync.WaitGroup
			sem := make(chan struct{}, slots)
			return func(t func()) {
				wg.Add(1)
				sem <- struct{}{}
				go func() { t(); <-sem; wg.Done() }()
			}, wg.Wait
		}},
		{"errgroup", func(b *testing.B) (func(func()), func()) {
			var g errgroup.Group
			g.SetLimit(slots)
			return func(t func()) { g.Go(func() error { t(); return nil }) }, func() { g.Wait() }
		}},
		{"semaphore", func(b *testing.B) (func(func()), func()) {
			var wg sync.WaitGroup
			sem := semaphore.NewWeighted(int64(slots))
			return func(t func()) {
				wg.Add(1)
				sem.Acquire(ctx, 1)
				go func() { t(); sem.Release(1); wg.Done() }()
			}, wg.Wait
		}},
		{"ants", func(b *testing.B) (func(func()), func()) {
			p, err := ants.NewPool(slots)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(p.Release)
			var wg sync.WaitGroup
			return func(t func()) {
				wg.Add(1)
				if err := p.Submit(func() { t(); wg.Done() }); err != nil {
					b.Fatal(err)
				}
			}, wg.Wait
		}},
		{"pond", func(b *testing.B) (func(func()), func()) {
			p := pond.NewPool(slots)
			b.Cleanup(p.StopAndWait)
			var wg sync.WaitGroup
			return func(t func()) { wg.Add(1); p.Submit(func() { t(); wg.Done() }) }, wg.Wait
		}},
		{"conc", func(b *testing.B) (func(func()), func()) {
			p := pool.New().WithMaxGoroutines(slots)
			return func(t func()) { p.Go(t) }, p.Wait
		}},
		{"cpuwork-Do", func(b *testing.B) (func(func()), func()) {
			e := newExec(b)
			return func(t func()) {
				if err := e.Do(ctx, cpuwork.Interactive, func(context.Context) error { t(); return nil }); err != nil {
					b.Fatal(err)
				}
			}, func() {}
		}},
		{"cpuwork-Go", func(b *testing.B) (func(func()), func()) {
			e := newExec(b)
			var wg sync.WaitGroup
			return func(t func()) {
				wg.Add(1)
				if _, err := e.Go(ctx, cpuwork.Batch, func(context.Context) error { t(); wg.Done(); return nil }); err != nil {
					b.Fatal(err)
				}
			}, wg.Wait
		}},
	}
}

func newExec(b *testing.B) *cpuwork.Executor {
	// An unbounded-enough queue: pond and the goroutine variants queue
	// without limit too, and this benchmark measures overhead, not shedding.
	var cl [4]cpuwork.ClassOptions
	for i := range cl {
		cl[i].QueueLimit = 1 << 30
	}
	e, err := cpuwork.New(cpuwork.Options{Slots: slots, Classes: cl})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.Close(context.Background()) })
	return e
}

func BenchmarkPeers(b *testing.B) {
	b.Logf("slots %d, GOMAXPROCS %d", slots, runtime.GOMAXPROCS(0))
	for _, work := range []time.Duration{0, time.Microsecond, 10 * time.Microsecond, 100 * time.Microsecond} {
		s := workload.NewSpin(work) // cpuwork bench's calibrated spinner
		if work == 0 {
			s.Iters = 0
		}
		task := func() { s.Run(0) }
		for _, producers := range []int{1, 4 * runtime.GOMAXPROCS(0)} {
			for _, r := range runners() {
				name := fmt.Sprintf("work=%v/producers=%d/%s", work, producers, r.name)
				b.Run(name, func(b *testing.B) {
					submit, wait := r.setup(b)
					b.ReportAllocs()
					b.ResetTimer()
					var wg sync.WaitGroup
					for p := range producers {
						n := b.N / producers
						if p < b.N%producers {
							n++
						}
						wg.Add(1)
						go func() {
							defer wg.Done()
							for range n {
								submit(task)
							}
						}()
					}
					wg.Wait()
					wait()
				})
			}
		}
	}
}

// TestSpinIsCalibrated checks the calibrated work takes about what it says
// (within a factor of 3, generous for a shared machine): a benchmark of
// "10 µs tasks" that ran 1 µs tasks would compare nothing.
func TestSpinIsCalibrated(t *testing.T) {
	sp := workload.NewSpin(100 * time.Microsecond)
	best := time.Duration(1 << 62)
	for range 20 {
		s := time.Now()
		sp.Run(0)
		best = min(best, time.Since(s))
	}
	if best < 33*time.Microsecond || best > 300*time.Microsecond {
		t.Errorf("100 µs of calibrated work took %v", best)
	}
}
