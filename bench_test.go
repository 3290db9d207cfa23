package cpuwork

import (
	"context"
	"testing"
)

// BenchmarkDoUncontended is the admission fast path: a free slot, nobody
// queued, an empty task.
func BenchmarkDoUncontended(b *testing.B) {
	e := newExec(b, Options{Slots: 4})
	ctx := context.Background()
	fn := func(context.Context) error { return nil }
	b.ReportAllocs()
	for b.Loop() {
		e.Do(ctx, Interactive, fn)
	}
}

func BenchmarkDoUncontendedNoLabels(b *testing.B) {
	e := newExec(b, Options{Slots: 4, DisableProfileLabels: true})
	ctx := context.Background()
	fn := func(context.Context) error { return nil }
	b.ReportAllocs()
	for b.Loop() {
		e.Do(ctx, Interactive, fn)
	}
}

// BenchmarkDoSaturated: 4xGOMAXPROCS goroutines submit empty tasks to
// GOMAXPROCS slots, so most calls queue.
func BenchmarkDoSaturated(b *testing.B) {
	e := newExec(b, Options{Slots: 2})
	ctx := context.Background()
	fn := func(context.Context) error { return nil }
	b.ReportAllocs()
	b.SetParallelism(4)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			e.Do(ctx, Interactive, fn)
		}
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

// BenchmarkGoWait submits one Batch task at a time and waits for it: the
// hand-off latency to a parked, demoted (SCHED_IDLE, locked) worker.
func BenchmarkGoWait(b *testing.B) {
	e := newExec(b, Options{Slots: 2})
	ctx := context.Background()
	fn := func(context.Context) error { return nil }
	b.ReportAllocs()
	for b.Loop() {
		t, _ := e.Go(ctx, Batch, fn)
		<-t.Done()
	}
}

// BenchmarkGoWaitNoDemotion is GoWait with plain (not demoted) Batch
// workers: the hand-off cost that demotion adds is the difference.
func BenchmarkGoWaitNoDemotion(b *testing.B) {
	e := newExec(b, Options{Slots: 2, NoDemotion: true})
	ctx := context.Background()
	fn := func(context.Context) error { return nil }
	b.ReportAllocs()
	for b.Loop() {
		t, _ := e.Go(ctx, Batch, fn)
		<-t.Done()
	}
}
