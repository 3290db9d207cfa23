package cpuwork

import (
	"context"
	"testing"
	"time"

	"github.com/cpuwork/cpuwork/budget"
)

// fakePacer returns a pacer on e whose CPU clock advances by perStep at
// each step and whose throttled-period counter is *throttled.
func fakePacer(e *Executor, quota float64, perStep *time.Duration, throttled *uint64) *pacer {
	var cpu time.Duration
	return &pacer{
		setPaced: e.setPaced, quota: quota, period: 100 * time.Millisecond, target: 0.9,
		cpu:       func() time.Duration { cpu += *perStep; return cpu },
		throttled: func() (uint64, bool) { return *throttled, true },
	}
}

func TestPacerPausesBatchWhenTheWindowUsesTheQuota(t *testing.T) {
	e := newExec(t, Options{Slots: 2})
	step := 5 * time.Millisecond // one core's worth per 5 ms tick: 1.0 core
	var thr uint64
	p := fakePacer(e, 1.25, &step, &thr)
	for range pacingSteps {
		p.step()
	}
	if e.paced.Load() {
		t.Fatal("paced at 1.0 core under a 1.25-core quota (target 0.9 -> 1.125)")
	}
	step = 7 * time.Millisecond // 1.4 cores
	for range pacingSteps + 1 {
		p.step()
	}
	if !e.paced.Load() {
		t.Fatal("not paced at 1.4 cores under a 1.25-core quota")
	}
	step = time.Millisecond
	for range pacingSteps + 1 {
		p.step()
	}
	if e.paced.Load() {
		t.Fatal("still paced after usage fell to 0.2 cores")
	}
}

func TestPacerLowersItsTargetAfterThrottling(t *testing.T) {
	e := newExec(t, Options{Slots: 1})
	step := time.Millisecond
	var thr uint64
	p := fakePacer(e, 1, &step, &thr)
	for range 2 * pacingSteps {
		p.step()
	}
	before := p.target
	thr = 3
	for range pacingSteps {
		p.step()
	}
	if p.target >= before {
		t.Errorf("target %v after a throttled period, was %v", p.target, before)
	}
	for range 50 * pacingSteps {
		p.step()
	}
	if p.target != pacingMaxTarget {
		t.Errorf("target %v after many clean periods, want %v", p.target, pacingMaxTarget)
	}
}

func TestPacedBatchWaitsWhileInteractiveRuns(t *testing.T) {
	e := newExec(t, Options{Slots: 2})
	step := time.Duration(0)
	var thr uint64
	p := fakePacer(e, 1, &step, &thr)
	p.setPaced(true)
	task, err := e.Go(context.Background(), Batch, func(context.Context) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.TryGo(context.Background(), Background, func(context.Context) error { return nil }); err != ErrSaturated {
		t.Errorf("TryGo(Background) while paced: %v", err)
	}
	if err := e.Do(context.Background(), Interactive, func(context.Context) error { return nil }); err != nil {
		t.Fatalf("Interactive while paced: %v", err)
	}
	select {
	case <-task.Done():
		t.Fatal("a Batch task ran while paced")
	default:
	}
	if q := e.Stats().Classes[Batch].Queued; q != 1 {
		t.Errorf("queued batch %d", q)
	}
	p.setPaced(false)
	if err := task.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestPacingIsOptInForQuotaBudgets(t *testing.T) {
	b := budget.Budget{Cores: 1.25, Affinity: 2, GOMAXPROCS: 2, Source: budget.SourceCgroupV1, SourceDir: "/nonexistent",
		Limits: []budget.Limit{{Dir: "/nonexistent", Period: 100 * time.Millisecond, Cores: 1.25}}}
	e := newExec(t, Options{WatchInterval: -1, PaceQuota: true, detect: func() (budget.Budget, error) { return b, nil }})
	if e.pacer == nil || e.Slots() != 2 {
		t.Errorf("PaceQuota: pacer %v slots %d, want pacing with ceil(1.25) = 2 slots", e.pacer != nil, e.Slots())
	}
	e2 := newExec(t, Options{WatchInterval: -1, Quota: QuotaFloor, detect: func() (budget.Budget, error) { return b, nil }})
	if e2.pacer != nil || e2.frac.Load() != nil || e2.Slots() != 1 {
		t.Errorf("QuotaFloor: pacer %v slots %d, want floor(1.25) = 1", e2.pacer != nil, e2.Slots())
	}
	e3 := newExec(t, Options{WatchInterval: -1, detect: func() (budget.Budget, error) { return b, nil }})
	if e3.pacer != nil || e3.frac.Load() == nil || e3.Slots() != 2 {
		t.Errorf("default (QuotaFraction): pacer %v, fractional %v, slots %d, want the fractional slot: ceil(1.25) = 2", e3.pacer != nil, e3.frac.Load() != nil, e3.Slots())
	}
}
