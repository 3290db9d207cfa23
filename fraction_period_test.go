package cpuwork

import (
	"errors"
	"testing"
	"time"
)

// periodSim drives a period-aligned fracPacer (QuotaStrict on a whole
// quota) on a fake clock against a kernel-like CFS bandwidth model: the
// quota is refilled on a fixed grid of periods at phase, nr_periods
// counts the periods the cgroup was active in (an idle cgroup's period
// timer stops), and once a period's usage reaches the quota every thread
// is frozen until the next boundary (one more nr_throttled).
type periodSim struct {
	p      *fracPacer
	q      float64
	period int64
	phase  int64
	t, u   int64 // fake now() and cumulative usage, ns
	lag    int64 // a closed slot's task runs on this long (to its next Checkpoint)

	running int   // slots running work
	want    int   // slots open (the pacer's n+1 - closed)
	closeAt int64 // when pending closes take effect (0: none)
	demand  func(t int64) int
	outside float64 // cores used outside the slots while the cgroup is not frozen

	periods, throttled uint64
	inPeriod           int64 // usage since the last boundary
	active, frozen     bool
	nextBoundary       int64
	mostRunning        int // the most slots seen running at once
	statOK             bool
}

func newPeriodSim(q int, phase, lag time.Duration, outside float64) *periodSim {
	period := int64(100 * time.Millisecond)
	s := &periodSim{q: float64(q), period: period, phase: int64(phase), lag: int64(lag), outside: outside, statOK: true}
	s.nextBoundary = s.phase
	if s.nextBoundary == 0 {
		s.nextBoundary = period
	}
	s.demand = func(int64) int { return 1 << 10 } // saturated
	s.p = &fracPacer{target: fracTargetMax, periodic: true, n: q, frac: 1, period: time.Duration(period), tickNs: period / fracTicks}
	s.want = q + 1
	s.p.setClosed = func(k int) {
		w := q + 1 - k
		if w < s.want && s.closeAt == 0 {
			s.closeAt = s.t + s.lag
		}
		s.want = w
	}
	s.p.usage = func() (time.Duration, error) { return time.Duration(s.u), nil }
	s.p.stat = func() (uint64, uint64, bool) { return s.periods, s.throttled, s.statOK }
	s.p.held = func() int { return s.running + s.p.closed }
	return s
}

// run advances the clock by d in 10 µs steps, stepping the pacer every
// tick while all slots are open and every quarter tick otherwise (as
// nextTick does).
func (s *periodSim) run(d time.Duration) {
	const step = int64(10 * time.Microsecond)
	end := s.t + int64(d)
	next := s.t
	for s.t < end {
		if s.t >= s.nextBoundary {
			if s.active {
				s.periods++
			}
			s.active, s.frozen, s.inPeriod = false, false, 0
			s.nextBoundary += s.period
		}
		if s.closeAt != 0 && s.t >= s.closeAt {
			s.closeAt = 0
		}
		// Slots run what is wanted; a close waits for its lag.
		target := min(s.want, s.demand(s.t))
		if target > s.running || s.closeAt == 0 {
			s.running = target
		}
		s.mostRunning = max(s.mostRunning, s.running)
		cores := 0.0
		if !s.frozen {
			cores = float64(s.running) + s.outside
		}
		if cores > 0 {
			s.active = true
		}
		used := int64(cores * float64(step))
		s.u += used
		s.inPeriod += used
		if !s.frozen && float64(s.inPeriod) >= s.q*float64(s.period) {
			s.frozen = true
			s.throttled++
		}
		s.t += step
		if s.t >= next {
			s.p.step(s.t)
			tick := s.p.tickNs
			if s.p.closed > 0 {
				tick /= fracClosedTicks
			}
			next = s.t + tick
		}
	}
}

// The period-aligned pacer keeps a saturated whole quota unthrottled, with
// work outside the slots (handlers, GC) and tasks that run on past a
// close, at any phase of the kernel's period grid, while still using most
// of the quota. The same model with the q slots unpaced is throttled in
// nearly every period where there is work outside the slots: the check
// can fail.
func TestPeriodPacingKeepsASaturatedWholeQuotaUnthrottled(t *testing.T) {
	for _, c := range []struct {
		q            int
		outside      float64
		lag, phase   time.Duration
		minUse       float64 // of the quota
		maxThrottled float64 // share of periods
	}{
		{1, 0.1, time.Millisecond, 37 * time.Millisecond, 0.85, 0.05},
		{1, 0.3, 2 * time.Millisecond, 93 * time.Millisecond, 0.85, 0.05},
		{1, 0, time.Millisecond, 0, 0.9, 0.05},
		{1, 0.15, 10 * time.Millisecond, 51 * time.Millisecond, 0.85, 0.05}, // 10 ms between Checkpoints (an inference call)
		{2, 0.2, time.Millisecond, 11 * time.Millisecond, 0.85, 0.05},
	} {
		s := newPeriodSim(c.q, c.phase, c.lag, c.outside)
		s.run(time.Second) // the target settles
		u0, p0, th0 := s.u, s.periods, s.throttled
		s.run(10 * time.Second)
		use := float64(s.u-u0) / float64(10*time.Second) / s.q
		share := float64(s.throttled-th0) / float64(max(1, s.periods-p0))
		t.Logf("q %d outside %.2f lag %v phase %v: %.3f of the quota used, %.1f %% of periods throttled, target %.3f, most slots running %d",
			c.q, c.outside, c.lag, c.phase, use, 100*share, s.p.target, s.mostRunning)
		if use < c.minUse || share > c.maxThrottled {
			t.Errorf("q %d outside %.2f lag %v phase %v: used %.3f of the quota (want >= %.2f), %.1f %% of periods throttled (want <= %.0f %%)",
				c.q, c.outside, c.lag, c.phase, use, c.minUse, 100*share, 100*c.maxThrottled)
		}
		// The unpaced reference: q slots always running beside the same
		// outside work.
		if c.outside > 0 {
			u := newPeriodSim(c.q, c.phase, c.lag, c.outside)
			u.want = c.q
			u.runUnpaced(5 * time.Second)
			if u.throttled*2 < u.periods {
				t.Errorf("the model is not throttled unpaced (%d of %d periods): the check above shows nothing", u.throttled, u.periods)
			}
		}
	}
}

// runUnpaced runs the model without a pacer.
func (s *periodSim) runUnpaced(d time.Duration) {
	p := s.p
	s.p = &fracPacer{periodic: true, n: p.n, frac: 1, period: p.period, tickNs: p.tickNs, target: fracTargetMax,
		setClosed: func(int) {}, usage: p.usage, stat: p.stat, held: p.held}
	s.p.usage = func() (time.Duration, error) { return 0, errUnread }
	s.run(d)
}

var errUnread = errors.New("unread")

// After an idle stretch the period's quota has room for more than the base
// slots: the extra slot opens (the work runs on q+1 cores, as unpaced),
// and the period still ends unthrottled.
func TestPeriodPacingOpensTheExtraSlotWhenThePeriodHasRoom(t *testing.T) {
	s := newPeriodSim(1, 20*time.Millisecond, time.Millisecond, 0.05)
	period := s.period
	// Idle for the first 60 % of every period, then saturated.
	s.demand = func(t int64) int {
		if (t-s.phase+period)%period < period*6/10 {
			return 0
		}
		return 8
	}
	s.run(500 * time.Millisecond)
	s.mostRunning = 0
	th0 := s.throttled
	s.run(3 * time.Second)
	if s.mostRunning != 2 {
		t.Errorf("at most %d slots ran after idle stretches: want the extra slot open (2)", s.mostRunning)
	}
	if s.throttled != th0 {
		t.Errorf("%d periods throttled", s.throttled-th0)
	}
}

// Where the cgroup idles its period timer stops and nr_periods stands
// still; the pacer predicts the boundaries on the grid, so the first busy
// period after the idle stretch is not throttled either.
func TestPeriodPacingPredictsBoundariesAcrossAnIdleStretch(t *testing.T) {
	s := newPeriodSim(1, 71*time.Millisecond, time.Millisecond, 0.2)
	s.run(time.Second)
	busy := s.demand
	s.demand = func(int64) int { return 0 }
	s.outside = 0
	p0 := s.periods
	s.run(450 * time.Millisecond) // idle: no period counted
	if s.periods != p0+1 {        // only the period the idle stretch began in
		t.Fatalf("the model counted %d periods while idle", s.periods-p0)
	}
	s.demand, s.outside = busy, 0.2
	th0 := s.throttled
	s.run(500 * time.Millisecond)
	if s.throttled != th0 {
		t.Errorf("%d of the periods after an idle stretch were throttled: the pacer lost the grid", s.throttled-th0)
	}
}
