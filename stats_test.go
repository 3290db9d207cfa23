package cpuwork

import (
	"context"
	"testing"
	"time"
)

func TestStatsSummaries(t *testing.T) {
	e := newExec(t, Options{Slots: 1})
	release := hold(t, e, 1)
	done := make(chan struct{})
	go func() {
		e.Do(context.Background(), Interactive, func(context.Context) error { spin(time.Millisecond); return nil })
		close(done)
	}()
	waitQueued(t, e, Interactive, 1)
	time.Sleep(2 * time.Millisecond)
	release()
	<-done
	cs := e.Stats().Classes[Interactive]
	if cs.QueueWait.Max < 2*time.Millisecond || cs.SlotTime.Max < time.Millisecond {
		t.Errorf("queue wait %v slot time %v", cs.QueueWait, cs.SlotTime)
	}
	if cs.Submitted != cs.Admitted || cs.Running != 0 || cs.Completed != cs.Admitted {
		t.Errorf("counters %+v", cs)
	}
	h := cs.SlotTime
	if len(h.Cumulative) == 0 || h.Cumulative[len(h.Cumulative)-1] != h.Count || h.SumSeconds <= 0 {
		t.Errorf("histogram %+v", h)
	}
}

func TestHistogramQuantilesWithinBucketPrecision(t *testing.T) {
	var h histogram
	for i := int64(1); i <= 10000; i++ {
		h.record(i*1000, 1) // 1 µs .. 10 ms uniform
	}
	s := h.snapshot()
	check := func(name string, got time.Duration, want float64) {
		if r := float64(got) / want; r < 0.93 || r > 1.07 {
			t.Errorf("%s %v, want %v", name, got, time.Duration(want))
		}
	}
	check("p50", s.P50, 5e6)
	check("p99", s.P99, 9.9e6)
	check("mean", s.Mean, 5.0005e6)
	if s.Max != 10*time.Millisecond || s.Count != 10000 {
		t.Errorf("max %v count %d", s.Max, s.Count)
	}
	for _, v := range []int64{0, 1, 15, 16, 17, 1 << 20, 1<<20 + 1, 1 << 50} {
		i := histIndex(v)
		if lo := histLower(i); lo > v && v < 1<<43 {
			t.Errorf("value %d in bucket %d with lower bound %d", v, i, lo)
		}
	}
}
