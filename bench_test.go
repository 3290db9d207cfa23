package cpuwork

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cpuwork/cpuwork/account"
)

var emptyTask = func(context.Context) error { return nil }

// benchDo is the admission fast path: a free slot, nobody queued, an empty
// Interactive task.
func benchDo(b *testing.B, o Options) {
	e := newExec(b, o)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		e.Do(ctx, Interactive, emptyTask)
	}
}

func BenchmarkDoUncontended(b *testing.B) { benchDo(b, Options{Slots: 4}) }

// BenchmarkDoUncontendedRequestCtx is BenchmarkDoUncontended with the
// context chain of a net/http request (the server's values, a cancel, a
// value of the application, no profiler labels): the cost that depends on
// the caller's context.
func BenchmarkDoUncontendedRequestCtx(b *testing.B) {
	e := newExec(b, Options{Slots: 4})
	type key int
	ctx := context.WithValue(context.Background(), key(0), "server")
	ctx = context.WithValue(ctx, key(1), "local addr")
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ctx = context.WithValue(ctx, key(2), "conn")
	ctx, cancel2 := context.WithCancel(ctx)
	defer cancel2()
	ctx = context.WithValue(ctx, key(3), "user")
	b.ReportAllocs()
	for b.Loop() {
		e.Do(ctx, Interactive, emptyTask)
	}
}

func BenchmarkDoUncontendedNoLabels(b *testing.B) {
	benchDo(b, Options{Slots: 4, noLabels: true})
}

// BenchmarkChanSemaphoreUncontended is the reference for
// BenchmarkDoUncontended: the same empty task under a buffered-channel
// semaphore of 4, the simplest bound a user would write instead.
func BenchmarkChanSemaphoreUncontended(b *testing.B) {
	sem := make(chan struct{}, 4)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		sem <- struct{}{}
		emptyTask(ctx)
		<-sem
	}
}

// BenchmarkDoOverChanSemaphore is BenchmarkDoUncontended over
// BenchmarkChanSemaphoreUncontended measured in one loop: each iteration
// times a block of uncontended Do calls and a block of as many rounds of a
// channel semaphore of 4, back to back, which first alternating. A host
// that slows down for a while slows both blocks of the pairs it spans, so
// the ratio is read pair by pair instead of between two benchmarks run
// apart. It reports the median pair's ratio (do/chan) and each side's
// median ns per call; ns/op is one pair of blocks.
func BenchmarkDoOverChanSemaphore(b *testing.B) {
	const block = 256
	e := newExec(b, Options{Slots: 4})
	sem := make(chan struct{}, 4)
	ctx := context.Background()
	doBlock := func() time.Duration {
		t0 := time.Now()
		for range block {
			e.Do(ctx, Interactive, emptyTask)
		}
		return time.Since(t0)
	}
	chanBlock := func() time.Duration {
		t0 := time.Now()
		for range block {
			sem <- struct{}{}
			emptyTask(ctx)
			<-sem
		}
		return time.Since(t0)
	}
	var ratios, dos, chans []float64
	for i := 0; b.Loop(); i++ {
		var d, c time.Duration
		if i%2 == 0 {
			d, c = doBlock(), chanBlock()
		} else {
			c, d = chanBlock(), doBlock()
		}
		ratios = append(ratios, float64(d)/float64(c))
		dos = append(dos, float64(d)/block)
		chans = append(chans, float64(c)/block)
	}
	b.ReportMetric(median(ratios), "do/chan")
	b.ReportMetric(median(dos), "do-ns")
	b.ReportMetric(median(chans), "chan-ns")
}

// median returns the median of xs (sorted in place); 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	if n := len(xs); n%2 == 0 {
		return (xs[n/2-1] + xs[n/2]) / 2
	}
	return xs[len(xs)/2]
}

// BenchmarkChanSemaphoreSaturated is the reference for
// BenchmarkDoSaturated: 4xGOMAXPROCS goroutines, a channel semaphore of 2.
func BenchmarkChanSemaphoreSaturated(b *testing.B) {
	sem := make(chan struct{}, 2)
	ctx := context.Background()
	b.ReportAllocs()
	b.SetParallelism(4)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			sem <- struct{}{}
			emptyTask(ctx)
			<-sem
		}
	})
}

// BenchmarkDoSaturated: 4xGOMAXPROCS goroutines submit empty tasks to
// GOMAXPROCS slots, so most calls queue.
func BenchmarkDoSaturated(b *testing.B) { benchDoSaturated(b, Options{Slots: 2}) }

// BenchmarkDoSaturatedAccountOff is BenchmarkDoSaturated with accounting
// off: what the default accounting costs the queued path.
func BenchmarkDoSaturatedAccountOff(b *testing.B) {
	benchDoSaturated(b, Options{Slots: 2, Account: account.Options{Every: -1}})
}

func benchDoSaturated(b *testing.B, o Options) {
	e := newExec(b, o)
	ctx := context.Background()
	b.ReportAllocs()
	b.SetParallelism(4)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			e.Do(ctx, Interactive, emptyTask)
		}
	})
}

// BenchmarkDoTargets is BenchmarkDoSaturated with latency targets that
// differ per task (every fourth 10x longer), so queued tasks are inserted
// by due rather than appended: the cost of earliest-due-first ordering.
// The targets are long enough that nothing is refused.
func BenchmarkDoTargets(b *testing.B) {
	e := newExec(b, Options{Slots: 2})
	var n atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(4)
	b.RunParallel(func(pb *testing.PB) {
		short := WithTarget(context.Background(), Target{Latency: time.Hour})
		long := WithTarget(context.Background(), Target{Latency: 10 * time.Hour})
		for pb.Next() {
			ctx := short
			if n.Add(1)%4 == 0 {
				ctx = long
			}
			e.Do(ctx, Interactive, emptyTask)
		}
	})
}

// BenchmarkCheckpointClassWaits is Checkpoint inside a task while its own
// class has waiters due later (FIFO: it never hands over): the extra
// atomic load and due comparison of the fast path.
func BenchmarkCheckpointClassWaits(b *testing.B) {
	e := newExec(b, Options{Slots: 1})
	b.ReportAllocs()
	e.Do(context.Background(), Interactive, func(ctx context.Context) error {
		queued := make(chan error, 1)
		go func() { queued <- e.Do(context.Background(), Interactive, emptyTask) }()
		for e.Stats().Classes[Interactive].Queued == 0 {
			time.Sleep(10 * time.Microsecond)
		}
		for b.Loop() {
			Checkpoint(ctx)
		}
		go func() { <-queued }()
		return nil
	})
}

// BenchmarkCheckpointNobodyWaits is Checkpoint inside a task with no queued
// work: the cost a tight loop pays per call.
func BenchmarkCheckpointNobodyWaits(b *testing.B) {
	e := newExec(b, Options{Slots: 1})
	b.ReportAllocs()
	e.Do(context.Background(), Interactive, func(ctx context.Context) error {
		for b.Loop() {
			Checkpoint(ctx)
		}
		return nil
	})
}

// benchGoWait submits one Batch task at a time and waits for it: the
// hand-off latency to a parked worker.
func benchGoWait(b *testing.B, o Options) {
	e := newExec(b, o)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		t, _ := e.Go(ctx, Batch, emptyTask)
		<-t.Done()
	}
}

// BenchmarkGoWait: the default, plain worker goroutines.
func BenchmarkGoWait(b *testing.B) { benchGoWait(b, Options{Slots: 2}) }

// BenchmarkGoWaitDemoted: the worker is demoted (SCHED_IDLE, locked to its
// thread, Batch.Demote); the difference to GoWait is the cost demotion adds.
func BenchmarkGoWaitDemoted(b *testing.B) {
	benchGoWait(b, Options{Slots: 2, Batch: BatchOptions{Demote: true}})
}

// BenchmarkCheckpointYield: the throughput cost of Checkpoint's yield interval.
// One op is a ~1 µs unit of CPU work followed by a Checkpoint, in a task
// that holds its slot with nothing else runnable; "none" is the unit
// without Checkpoint. The ratio to "none" is what the yields cost a batch
// task (docs/performance.md).
func BenchmarkCheckpointYield(b *testing.B) {
	unit := func() {
		x := uint64(1)
		for range 600 {
			x = x*6364136223846793005 + 1442695040888963407
		}
		benchSink.Add(x & 1)
	}
	b.Run("none", func(b *testing.B) {
		for b.Loop() {
			unit()
		}
	})
	for _, d := range []time.Duration{-1, 200 * time.Microsecond, 100 * time.Microsecond, 50 * time.Microsecond, 25 * time.Microsecond} {
		name := "yield=" + d.String()
		if d < 0 {
			name = "yield=off"
		}
		b.Run(name, func(b *testing.B) {
			e := newExec(b, Options{Slots: 1, checkpointYield: d})
			e.Do(context.Background(), Batch, func(ctx context.Context) error {
				for b.Loop() {
					unit()
					Checkpoint(ctx)
				}
				return nil
			})
		})
	}
}

var benchSink atomic.Uint64

// spin10us is about 10 µs of CPU work.
func spin10us(context.Context) error {
	x := uint64(1)
	for i := range 4_000 {
		x = x*6364136223846793005 + uint64(i)
	}
	sinkU.Store(x)
	return nil
}

// benchAccount runs 10 µs tasks on one slot with accounting set to every.
func benchAccount(b *testing.B, every int) {
	e := newExec(b, Options{Slots: 1, Account: account.Options{Every: every}})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		e.Do(ctx, Interactive, spin10us)
	}
}

// BenchmarkAccountedTask: every task accounted: the cost per accounted
// task is its time minus BenchmarkAccountOff's.
func BenchmarkAccountedTask(b *testing.B) { benchAccount(b, 1) }

// BenchmarkAccountDefault: the default sampling (one in 1024).
func BenchmarkAccountDefault(b *testing.B) { benchAccount(b, 0) }

// BenchmarkAccountOff: accounting off (Every < 0).
func BenchmarkAccountOff(b *testing.B) { benchAccount(b, -1) }

// BenchmarkAllowSaturated is Allow with a latency target while the one
// slot is held and a task waits: the door's estimate under the lock,
// without a submission.
func BenchmarkAllowSaturated(b *testing.B) {
	e := newExec(b, Options{Slots: 1})
	gate := make(chan struct{})
	held := make(chan struct{})
	done := make(chan struct{}, 2)
	go func() {
		e.Do(context.Background(), Interactive, func(context.Context) error { close(held); <-gate; return nil })
		done <- struct{}{}
	}()
	<-held
	go func() { e.Do(context.Background(), Interactive, emptyTask); done <- struct{}{} }()
	for e.Stats().Classes[Interactive].Queued == 0 {
		time.Sleep(10 * time.Microsecond)
	}
	ctx := WithTarget(context.Background(), Target{Latency: time.Hour, Service: time.Millisecond})
	b.ReportAllocs()
	for b.Loop() {
		if err := e.Allow(ctx, Interactive); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	close(gate)
	<-done
	<-done
}

// BenchmarkDoRecorded is BenchmarkDoUncontended with every request
// recorded (Options.Record): the recorder's cost per request is the
// difference (its budget: 1 µs, 1 % of a core at 10,000 requests/s), and
// it allocates nothing.
func BenchmarkDoRecorded(b *testing.B) {
	benchDo(b, Options{Slots: 4, Record: RecordOptions{Requests: DefaultRecordRequests}})
}

// BenchmarkDoRecordedKeyed is BenchmarkDoRecorded for requests with a
// key and a target, as the middleware submits them (the key's digest and
// the target's read are the difference).
func BenchmarkDoRecordedKeyed(b *testing.B) {
	e := newExec(b, Options{Slots: 4, Record: RecordOptions{Requests: DefaultRecordRequests}})
	ctx := WithKey(WithTarget(context.Background(), Target{Latency: time.Second}), "tenant-1234")
	b.ReportAllocs()
	for b.Loop() {
		e.Do(ctx, Interactive, emptyTask)
	}
}

// BenchmarkDoObserved is an empty task under Observe: the reads of the
// process's CPU time, the thread's CPU clock and the thread's ID at the
// task's start and end.
func BenchmarkDoObserved(b *testing.B) {
	benchDo(b, Options{Slots: 4, Record: RecordOptions{Observe: true}})
}
