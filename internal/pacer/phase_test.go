package pacer

import (
	"testing"
	"time"
)

// phased gives s's pacer the kernel's period count at fake time t, the
// grid's boundaries offset by off.
func (s *sim) phased(period, off time.Duration) {
	s.p.phase = phase{read: func() (uint64, bool) {
		return uint64((s.t + int64(period) - int64(off)) / int64(period)), true
	}}
	s.host.stuck = func() bool { return s.closeAt != 0 }
}

// periodUse is the largest use of any of the kernel's periods (grid offset
// off, 1 ms resolution) from ms index from on, in cores.
func (s *sim) periodUse(from int, period, off time.Duration) float64 {
	w, o := int(period/time.Millisecond), int(off/time.Millisecond)
	most := 0.0
	for i := from + (o-from%w+w)%w; i+w < len(s.usageAt); i += w {
		most = max(most, float64(s.usageAt[i+w]-s.usageAt[i])/float64(period))
	}
	return most
}

func TestPacedInThePeriodsPhaseTheQuotaIsUsedAndNoPeriodPassesIt(t *testing.T) {
	for _, c := range []struct {
		q        float64
		period   time.Duration
		lag, off time.Duration
	}{
		{1.25, 100 * time.Millisecond, 0, 0},
		{1.5, 100 * time.Millisecond, time.Millisecond, 37 * time.Millisecond},
		{1.5, 100 * time.Millisecond, 8 * time.Millisecond, 61 * time.Millisecond}, // tasks that cannot give the slot back for 8 ms
		{2.5, 100 * time.Millisecond, 2 * time.Millisecond, 90 * time.Millisecond},
		{1.25, 20 * time.Millisecond, 250 * time.Microsecond, 7 * time.Millisecond},
	} {
		s := newSim(c.q, c.period, c.lag)
		s.phased(c.period, c.off)
		s.run(3 * time.Second)
		skip := int(c.period/time.Millisecond) * 5
		avg, worst := s.avg(skip), s.periodUse(skip, c.period, c.off)
		if avg < 0.94*c.q || worst > c.q {
			t.Errorf("quota %v period %v close lag %v: used %.3f cores on average (want >= 0.94 x quota), %.3f in the worst of the kernel's periods (want <= quota)",
				c.q, c.period, c.lag, avg, worst)
		}
	}
}

// A burst of every slot that the period's quota covers keeps the extra
// slot open where the kernel would not throttle; the bucket, which does
// not know the period's phase, closes it.
func TestABurstThePeriodsQuotaCoversKeepsTheExtraSlotOpen(t *testing.T) {
	const period, off = 100 * time.Millisecond, 20 * time.Millisecond
	burst := func(t int64) float64 { // 2 cores for 40 ms in each period, then 0.3
		if (t-int64(off))%int64(period) < int64(40*time.Millisecond) {
			return 2
		}
		return 0.3
	}
	closed := func(phased bool) time.Duration {
		s := newSim(1.5, period, time.Millisecond)
		s.demand = burst
		if phased {
			s.phased(period, off)
		}
		s.run(300 * time.Millisecond) // the phase is known after a boundary
		c0 := s.p.closedTotal
		s.run(2 * time.Second)
		if use := s.periodUse(400, period, off); use > 1.5 {
			t.Errorf("phased %v: %.3f cores in one of the kernel's periods, over the 1.5-core quota", phased, use)
		}
		return time.Duration(s.p.closedTotal - c0)
	}
	if c := closed(true); c > 0 {
		t.Errorf("paced in the period's phase, the extra slot was closed %v in 2 s of bursts the quota covers (want 0)", c)
	}
	if c := closed(false); c < 100*time.Millisecond {
		t.Errorf("the bucket closed the extra slot only %v in 2 s of 40-ms bursts of 2 cores: the case does not tell the two apart", c)
	}
}

// Slots held full through a period whose CPU use stayed under the pace
// open one more slot even while the door keeps the queue empty: the
// slots hold tasks that are off the CPU part of the time. Slots held
// but not full do not.
func TestFullSlotsUnderUsingTheQuotaOpenOneMoreWithoutAQueue(t *testing.T) {
	var held int64
	p := &Pacer{n: 1, frac: 0.5, target: fracTargetMax, busySlots: true, open: true, period: 100 * time.Millisecond,
		host: &testHost{occupied_: func() (int64, bool) { return held, false }}}
	period := func(h int64) int {
		held = h
		for range 50 {
			p.occupancySample(float64(2 * time.Millisecond))
		}
		p.busyLocked(0.85, false, 0)
		return p.Slots()
	}
	if n := period(1); n != 2 {
		t.Fatalf("one of two slots held, no queue, quota under-used: %d slots, want 2", n)
	}
	if n := period(2); n != 3 {
		t.Fatalf("both slots held, no queue, quota under-used: %d slots, want 3", n)
	}
	if n := period(3); n != 4 {
		t.Fatalf("all three slots held, no queue, quota still under-used: %d slots, want 4", n)
	}
}
