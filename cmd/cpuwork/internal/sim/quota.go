package sim

import (
	"math"
	"time"

	"github.com/cpuwork/cpuwork/budget"
	"github.com/cpuwork/cpuwork/internal/admission"
	"github.com/cpuwork/cpuwork/internal/pacer"
)

// The CFS quota as the kernel enforces it (Workload.Quota): the
// requests on a slot each run on a CPU of their own, the cgroup's use
// counts up at that many cores, and once it reaches Quota x Period in a
// period every running request is frozen until the period ends
// (Documentation/scheduler/sched-bwc.rst). The replay keeps two clocks:
// now, the wall clock every latency is read on, and cpuNow, which stops
// while the cgroup is frozen and which every request's progress is
// read on. An event that marks CPU progress (a request's end, a
// Checkpoint, a time slice's end) is pushed with pushCPU and moves
// later by each freeze that begins before it. Without a quota the two
// clocks are one and nothing here pushes an event.
//
// cpuwork's pacer of the fractional slot (internal/pacer) runs as the
// executor's default (QuotaFraction) when Workload.Pace is set: it
// reads this model's usage, throttled periods and periods, steps every
// tick of the virtual clock and at a task's end, and opens and closes
// the Granter's extra slot through the same seam (startPacer). The
// clairvoyant limit plans without throttling (it stays an upper bound).

// defaultPeriod is the kernel's default CFS period.
const defaultPeriod = 100 * time.Millisecond

// quotaState is a replay's CFS accounting (sim.q).
type quotaState struct {
	on        bool
	quota     float64 // ns of CPU per period
	period    int64
	used      float64 // ns of CPU used in the current period
	total     float64 // ns of CPU used in the periods before it
	at        int64   // when used was last brought up to date
	periodEnd int64
	onCPU     int   // requests running now (each on a CPU)
	frozen    bool  // the cgroup is throttled until periodEnd
	freezeAt  int64 // when the current freeze began
	frozenNs  int64 // the freezes' total before the current one
	gen       uint64
	// Throttled counts the periods that were throttled, Periods all of
	// them (Result's figures).
	throttled, periods int
}

// startQuota sets the replay's quota up at the virtual clock's origin.
func (s *sim) startQuota() {
	w := s.wl
	if w.Quota <= 0 {
		return
	}
	p := w.Period
	if p <= 0 {
		p = defaultPeriod
	}
	s.q = quotaState{on: true, quota: w.Quota * float64(p), period: int64(p), at: origin, periodEnd: origin + int64(p)}
	s.push(s.q.periodEnd, evPeriod, nil, 0)
}

// cpuNow is the clock requests progress on: now less every freeze.
func (s *sim) cpuNow() int64 {
	if !s.q.on {
		return s.now
	}
	if s.q.frozen {
		return s.q.freezeAt - s.q.frozenNs
	}
	return s.now - s.q.frozenNs
}

// pushCPU pushes an event d of CPU progress from now: d later, or d
// after the current freeze ends.
func (s *sim) pushCPU(d int64, kind uint8, j *job, gen uint64) {
	at := s.now
	if s.q.frozen {
		at = s.q.periodEnd
	}
	s.pushEvent(event{at: at + d, kind: kind, j: j.ref(), gen: gen, cpu: s.q.on})
}

// onCPU counts a request starting (+1) or stopping (-1) to run.
func (s *sim) onCPU(delta int) {
	if !s.q.on {
		return
	}
	s.account()
	s.q.onCPU += delta
	s.armThrottle()
}

// account brings the period's use up to now.
func (s *sim) account() {
	q := &s.q
	if !q.frozen {
		q.used += float64(q.onCPU) * float64(s.now-q.at)
	}
	q.at = s.now
}

// armThrottle pushes the time the quota runs out at the current rate,
// if within the period (a new generation: the last one is stale).
func (s *sim) armThrottle() {
	q := &s.q
	q.gen++
	if q.frozen || q.onCPU == 0 {
		return
	}
	at := s.now + int64(math.Ceil((q.quota-q.used)/float64(q.onCPU)))
	if at < q.periodEnd {
		s.push(max(at, s.now), evThrottle, nil, q.gen)
	}
}

// throttle freezes the cgroup until the period ends: every pending CPU
// event moves that much later.
func (s *sim) throttle(gen uint64) {
	q := &s.q
	if gen != q.gen || q.frozen {
		return
	}
	s.account()
	q.frozen, q.freezeAt = true, s.now
	q.throttled++
	d := q.periodEnd - s.now
	for i := range s.heap {
		if s.heap[i].cpu {
			s.heap[i].at += d
		}
	}
	s.heap.init()
}

// newPeriod starts the next period: the freeze, if any, ends, and the
// use starts again from 0. The next period's event is pushed while
// anything but the quota's and the pacer's own events is queued.
func (s *sim) newPeriod() {
	q := &s.q
	s.account()
	if q.frozen {
		q.frozenNs += s.now - q.freezeAt
		q.frozen = false
	}
	q.total += q.used
	q.used, q.periods = 0, q.periods+1
	q.periodEnd += q.period
	if s.work > 0 {
		s.push(q.periodEnd, evPeriod, nil, 0)
	}
	s.armThrottle()
}

// pacerHost is the Granter as the pacer's Host: its pacer seam, and no
// slot count or warning of an executor's.
type pacerHost struct{ *admission.Pacer }

func (pacerHost) SetSlots(int)        {}
func (pacerHost) Unpaceable(int, int) {}

// startPacer starts cpuwork's pacer of the quota's fractional slot on
// g, when the workload has a quota and asks for it (Pace): the budget of
// a cgroup of Quota cores on Slots CPUs, read through this model.
func (s *sim) startPacer(g *admission.Granter) {
	w := s.wl
	if !s.q.on || !w.Pace {
		return
	}
	period := time.Duration(s.q.period)
	b := budget.Budget{Cores: w.Quota, Source: budget.SourceCgroupV2, SourceDir: "replay",
		Limits:   []budget.Limit{{Dir: "replay", Period: period, Cores: w.Quota, Quota: time.Duration(w.Quota * float64(period))}},
		Affinity: w.Slots, GOMAXPROCS: w.Slots, CgroupVersion: 2}
	p := pacer.New(b, pacer.Config{Host: pacerHost{g.Pacer()}, Clock: func() int64 { return s.now },
		Cgroup: &pacer.Cgroup{
			Usage: func() (time.Duration, error) {
				s.account()
				return time.Duration(s.q.total + s.q.used), nil
			},
			Throttled: func() (uint64, bool) { return uint64(s.q.throttled), true },
			Periods:   func() (uint64, bool) { return uint64(s.q.periods), true },
		}})
	if p == nil {
		return // a whole quota, or no P for the extra slot: nothing to pace
	}
	s.pacer = p
	s.push(s.now+s.q.period/50, evPace, nil, 0) // Run's first tick: a fiftieth of the period
}

// paceTick steps the pacer as its Run does at each tick (Tick) and
// pushes the next tick while anything but the quota's and the pacer's
// own events is queued.
func (s *sim) paceTick() {
	d := s.pacer.Tick()
	if s.work > 0 {
		s.push(s.now+int64(d), evPace, nil, 0)
	}
}
