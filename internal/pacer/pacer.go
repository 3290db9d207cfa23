// Package pacer paces the fractional slot of a CPU quota: it opens and
// closes the executor's extra slot so that the cgroup's use stays under
// its quota where a throttled period would cost the latency objective,
// and reads the cgroup's usage and throttling to do so. It knows the
// executor only through Host and the time only through Config.Clock.
package pacer

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cpuwork/cpuwork/budget"
	"github.com/cpuwork/cpuwork/pacing"
)

// The fractional slot. Under a CFS quota of q cores (1.25, 1.5, 2.5) floor(q)
// slots leave q - floor(q) of the quota unused, and ceil(q) slots spend the
// quota early in each period and get every thread frozen for the rest of it
// (Documentation/scheduler/sched-bwc.rst). With Options.Quota set to
// QuotaFraction (the default), the executor runs ceil(q) slots of which the
// last is open only while the cgroup's CPU use stays under its quota (for
// q >= 1; below one core it runs the one slot unpaced, as QuotaFloor).
// With QuotaStrict a whole quota q is paced the same way when GOMAXPROCS
// is above q (Go's default for a 1-CPU quota is 2 Ps,
// runtime/cgroup_linux.go): there the slots alone fill the quota and
// goroutines outside the executor (request handlers, GC workers) take the
// process over it, so the q-th slot is the paced one. Its cost: the slots
// get target·q minus what the rest of the process uses, where unpaced
// they share the whole quota and the kernel freezes everyone once it is
// spent (measured in docs/architecture.md, "Slots"):
//
//   - every tick (period/50: 2 ms for the default 100 ms period), and at a
//     task's end when the tick is late (a ticker goroutine waits for a P
//     like any other), it reads the CPU usage of the cgroup that sets the
//     quota (cpu.stat usage_usec on v2, cpuacct.usage on v1 where cpuacct
//     is mounted with cpu; else the process's own CPU time) and adds
//     target·q·Δt - Δusage to a token bucket of CPU time, capped at
//     period/50 (2 ms; 1 ms used 91-92 % of a 1.5-core quota in the
//     quota scenario's rounds, where a round's last task runs alone, 2 ms
//     93.9 %; docs/architecture.md);
//   - target starts at 0.97 (so ≥ 95 % of the quota is used where the work
//     fills the slots); the extra slot is open while the bucket holds
//     tokens. Closing it
//     takes one slot away (the free count goes negative when all are busy);
//     the task over the count gives its slot back at its next Checkpoint
//     (or when it ends) and queues again at its own due's place in its
//     class (internal/admission);
//   - where the cgroup's cpu.stat counts its periods, a fractional quota's
//     extra slot is paced within the kernel's period instead, once a
//     closed stretch has been measured (phase.go); the bucket
//     paces until then, and always for QuotaStrict's whole slot;
//   - for the bucket the period's phase is not needed: it keeps the usage of every
//     window of one period, whatever its start, under target·q·period plus
//     the cap and one task's overshoot past the close (the margin, 3 % of
//     the quota at the highest target: 3.75 ms of a 1.25-core quota per
//     100 ms, holds the 2 ms cap and a close one tick late at 0.8 cores over the pace;
//     pacer_test.go checks every phase with tasks that run on up to
//     2 ms past a close), so the kernel's period
//     (whose phase can be read from nr_periods but is not needed here,
//     docs/architecture.md "Slots") stays under the quota too;
//   - once per period nr_throttled of cpu.stat is read: a newly throttled
//     period lowers target by 5 % (to 0.5 at least), a clean one raises it
//     by 0.005 (to 0.97 at most); a throttled period in which a close
//     took more than two ticks to take effect (the task over the count
//     called no Checkpoint: cgo, a third-party library's loop) leaves it
//     as it is, since a lower target would not have stopped that task
//     and would leave the quota idle between such tasks; so does one with
//     a stretch of ticks (20 ms or more, the close in effect throughout) in
//     which the process used more than the quota while the extra slot was
//     closed (the always-open slots passed it by themselves: a task that
//     fans out over several threads, like an image library's parallel
//     resize, or work outside the executor). The period after such a
//     held one is paced at the whole quota instead of target·q: the
//     margin below the quota is there to keep the kernel from throttling,
//     and while the throttle comes from what the pacer cannot stop it
//     only leaves the quota idle (measured on a saturated image server
//     whose requests fan out and never yield: docs/results.md, "What a
//     feature costs"). A period throttled while
//     paced at the whole quota with nothing stuck, or a clean one,
//     returns to target·q (the first leaves the target as it is: the
//     whole pace, not the target, was throttled).
//
// All classes share the closed count: the extra slot is as unavailable to
// Critical work as to Batch while closed (a Critical task that would take
// it would get every thread of the cgroup frozen a few milliseconds later).

const (
	fracTargetMax   = 0.97
	fracTargetMin   = 0.5
	fracTicks       = 50 // ticks per period
	fracClosedTicks = 4  // steps per tick while the extra slot is closed
	fracCapDivisor  = 50 // bucket cap = period / fracCapDivisor
	// fracDebtCaps bounds the bucket's debt, in caps (4 ms for a 100 ms
	// period). A task that gives its slot back at a Checkpoint overshoots
	// a close by well under a cap; a larger debt comes from use the pacer
	// could not stop (a task without Checkpoint, a task fanning out over
	// several threads), which the kernel has already charged by
	// throttling: paying it again by keeping the extra slot closed left
	// the quota idle (a 1.5-CPU image server: the extra slot closed 66-84 %
	// of the time, 81-87 % of the quota used against a semaphore's 87-91 %,
	// docs/raw/realserver-step-imageproxy-pacing-seed2422.txt).
	fracDebtCaps = 2
	// fracBusyMargin: a period whose CPU use stayed more than this under
	// the pace while its slots were full nearly all of it opens one more slot
	// (Pacer.extra): the slots hold tasks that are not on a CPU
	// (reading a body, fetching a source, waiting for a P) and leave the
	// quota idle. A throttled period closes one again.
	fracBusyMargin = 0.07
	// fracBusyDelay: the process's kernel run delay, as a share of the
	// quota's cores over a period, above which no slot is added and one is
	// closed: the quota idles because another process wants the CPUs, not
	// because the slots hold tasks that are off them.
	fracBusyDelay = 0.10
	// fracStretchTicks, fracSlackCores: a stretch of ticks with the extra
	// slot closed passes the quota (closedOver) when it is at least
	// fracStretchTicks long (20 ms of a 100 ms period) and used more than
	// fracSlackCores of a core over the quota on average: long and large
	// enough that the usage counter's lag (a kernel tick per running
	// thread) and the runtime's own threads do not pass for a second core.
	fracStretchTicks = 10
	fracSlackCores   = 0.25
)

// Pacer opens and closes the extra slot. Its clock and counters are
// injectable for tests.
type Pacer struct {
	mu     sync.Mutex
	n      int     // floor(quota): slots always open
	frac   float64 // quota - n; 0: nothing to pace
	strict bool    // QuotaStrict: whole quotas paced too
	period time.Duration
	target float64
	tokens float64 // ns of CPU the process may still use above its pace
	open   bool
	// host is what the pacer steers: the executor or a test's model;
	// clock its time (nil: the package's own).
	host  Host
	clock func() int64

	usage     func() (time.Duration, error) // cumulative CPU of the cgroup (or process)
	throttled func() (uint64, bool)         // cumulative nr_throttled, if readable
	// stuckNs is how long, in the current period, the extra slot was
	// closed while a task still ran over the count (Host.overCommitted).
	stuckNs int64
	// closedOver: in the current period, a tick in which the extra slot
	// was closed (and nothing ran over the count) used more than the
	// quota: the slots that are always open passed it by themselves.
	// settled: the tick now running started with the close in effect
	// (closed at the last two steps, nothing over the count); only a
	// stretch of such ticks can set closedOver: stretchNs long, its use
	// overNs over the quota.
	closedOver, settled bool
	overNs, stretchNs   float64
	// whole: the last period was throttled by what the pacer could not
	// stop (held): this one is paced at the whole quota, not target·q.
	whole bool
	// closedTotal, lowered and held are Stats.Pacing's counters: the
	// time closed, the throttled periods that lowered the target and
	// those that left it.
	closedTotal   int64
	lowered, held uint64
	// occupancy is the slots held on average while a task queued, a
	// moving average over about one period (occupancySample): the door's
	// divisor of the work queued (capacity).
	occupancy float64

	lastT, lastU       int64 // at the last step
	periodT            int64 // start of the current feedback period
	lastThrot          uint64
	haveThrot, started bool
	lastStep           atomic.Int64 // now of the last step, for MaybeStep
	tickNs             atomic.Int64 // read by maybeStep without mu
	closeUsage         func()
	phase              phase // the kernel's period, where cpu.stat counts it
	// stopped: run returned (Close) and opened the extra slot for good;
	// a later step (maybeStep, at a task's end) changes nothing.
	stopped bool

	// extra is the slots opened beyond n+1 while the quota stays
	// under-used with its slots full (fracBusyMargin), at most n+1; each new
	// count (n+1+extra) goes to Host.setSlots. Only with busySlots
	// (the executor's pacer; tests of the paced slot alone leave it off).
	// periodU is the usage at the current period's start; fullTicks and
	// ticks count the period's steps with every open slot held or a task
	// queued, and in all.
	extra            int
	busySlots        bool
	periodU          int64
	fullTicks, ticks int
	// runDelay reads the process's cumulative kernel run delay (nil: not
	// read, as if none); delay and delayT are the last reading.
	runDelay  func() (time.Duration, bool)
	delay     time.Duration
	delayT    int64
	haveDelay bool

	// winPeriods and winHeld count the periods of the current window of
	// fracUnpaceableWindow and the held ones among them; unpaceable is
	// set, for good, when a window held fracUnpaceableShare of them or
	// more, and Host.unpaceable is then called, by the step that set
	// it, without mu held, with the window's counts.
	winPeriods, winHeld int
	unpaceable          bool

	// objective is the tightest latency objective of the work queued in
	// the last two periods (Host.objective; 0: none known), cpus the
	// CPUs the process may run on (0: unknown): absorbedLocked's inputs.
	objective time.Duration
	cpus      int

	// cgroup, when set, is read instead of the cgroup's files.
	cgroup *Cgroup

	// spent is what the door was last told (paceLocked); throttledLast:
	// the last period was throttled; forced: in this period the extra
	// slot was held open while a class shed.
	spent, throttledLast, forced bool
	// quotaTold is what the door was last told of the quota (SetQuota).
	quotaTold float64
}

// Host is the pacer's one seam to what it paces: the executor or a
// test's model. The pacer calls it; nothing else of
// the executor is known to it.
type Host interface {
	// setExtraOpen opens or closes the extra slot; called with the
	// pacer's mu held, on every change.
	SetExtraOpen(open bool)
	// overCommitted reports that the extra slot is closed but a task
	// still runs over the count (it has not reached a Checkpoint or its
	// end).
	OverCommitted() bool
	// occupied reads the slots held now and whether a task is queued.
	Occupied() (held int64, queued bool)
	// setPacedCapacity hands the door each new capacity (occupancy).
	SetPacedCapacity(c float64)
	// setSlots sets the slot count (n+1+extra).
	SetSlots(n int)
	// unpaceable says, once, that held of the last periods periods were
	// throttled by tasks the pacer could not stop.
	Unpaceable(held, periods int)
	// shedding reports whether a class sheds in a clear overload;
	// setBudgetSpent tells the door whether the CPU budget is spent for
	// now (paceLocked).
	Shedding() bool
	SetBudgetSpent(spent bool)
	// setQuota gives the door the quota's cores while the extra slot is
	// kept open and the kernel bounds the work (absorbedLocked); 0 while
	// it is paced (paceLocked, on every change).
	SetQuota(cores float64)
	// objective is the tightest latency objective of the work queued
	// recently (0: none known); with turn a new window starts (once per
	// period).
	Objective(turn bool) time.Duration
}

// fracUnpaceableWindow, fracUnpaceableShare: a pacer whose window of
// periods was throttled by what it could not stop (held) in a quarter of
// them or more cannot keep the cgroup under its quota: its tasks hold
// the extra slot through the throttle (cgo or system calls, which cannot
// give a slot back at a Checkpoint, or work that fans out over threads).
const (
	fracUnpaceableWindow = 40
	fracUnpaceableShare  = 0.25
)

// Config is what a Pacer needs beside the budget.
type Config struct {
	// Strict paces a whole quota too when GOMAXPROCS is above it
	// (QuotaStrict); otherwise only a fractional one is paced.
	Strict bool
	// Host is what the pacer steers (required).
	Host Host
	// Clock is the time in ns on a monotonic clock (nil: one of the
	// package's own).
	Clock func() int64
	// RunDelay reads the process's cumulative kernel run delay (nil: not
	// read, as if none): a quota left idle because other processes want
	// the CPUs opens no busy slot.
	RunDelay func() (time.Duration, bool)
	// BusySlots lets the pacer open more slots while the slots are full
	// and the quota idles (their tasks are off the CPU), through
	// Host.SetSlots.
	BusySlots bool
	// Cgroup reads the quota's cgroup instead of its files (nil: the
	// files of the budget's limiting cgroup): a replay's model of it.
	Cgroup *Cgroup
}

// Cgroup is what the pacer reads of the cgroup that sets the quota:
// its cumulative CPU usage, and from its cpu.stat the throttled periods
// and all periods (ok false: unreadable now).
type Cgroup struct {
	Usage     func() (time.Duration, error)
	Throttled func() (n uint64, ok bool)
	Periods   func() (n uint64, ok bool)
}

// New returns the pacer of b's quota, or nil when b has no quota to pace
// (none, below one core, whole without QuotaStrict and a P beyond it, or
// no P for an extra slot).
func New(b budget.Budget, cfg Config) *Pacer {
	p := &Pacer{target: fracTargetMax, open: true, host: cfg.Host, strict: cfg.Strict,
		clock: cfg.Clock, runDelay: cfg.RunDelay, busySlots: cfg.BusySlots, cgroup: cfg.Cgroup}
	if !p.configure(b) {
		return nil
	}
	return p
}

// start is the package's own clock's origin.
var start = time.Now()

// now is the clock's time in ns.
func (p *Pacer) now() int64 {
	if p.clock == nil {
		return int64(time.Since(start))
	}
	return p.clock()
}

// Stats reads what the executor reports of the pacer (its Warning is
// the executor's).
func (p *Pacer) Stats() pacing.Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := pacing.Stats{Paced: p.frac > 0, Target: p.target, Closed: time.Duration(p.closedTotal),
		Lowered: p.lowered, Held: p.held, Occupancy: p.capacityLocked()}
	if p.frac > 0 {
		st.Pause, st.Objective, st.Absorbed = p.pauseLocked(), p.objective, p.absorbedLocked()
	}
	return st
}

// Quota reads how the pacer splits the quota now: whole slots always
// open, the fraction paced (0: nothing paced), and whether the extra
// slot is open.
func (p *Pacer) Quota() (whole int, fraction float64, open bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n, p.frac, p.open
}

// configure reads n, frac, the period and the usage source from b; it
// reports whether b has a fractional quota.
func (p *Pacer) configure(b budget.Budget) bool {
	l, ok := b.Limiting()
	if !ok || l.Period <= 0 {
		p.n, p.frac = budget.Whole(b.Cores, false), 0
		return false
	}
	q := b.Cores
	n := math.Floor(q)
	frac := q - n
	switch {
	case n < 1:
		// Below one core the one slot would be the paced one, and pacing
		// it only adds idle gaps to a process that is throttled whenever
		// it is busy.
		p.n, p.frac = int(n), 0
		return false
	case frac < 0.01 && p.strict && b.GOMAXPROCS > int(n):
		// A whole quota with a P beyond the slots (Go's default gives a
		// 1-CPU quota 2 Ps, runtime/cgroup_linux.go): goroutines outside
		// the executor (handlers, GC workers) run beside full slots and
		// take the process over its quota. The last whole slot is the
		// paced one: n-1 always open, one open while the cgroup stays
		// under target x q.
		n, frac = n-1, 1
	case frac < 0.01 || (b.GOMAXPROCS > 0 && int(n)+1 > b.GOMAXPROCS):
		// Whole with no P to spare (the slots' own use cannot pass the
		// quota); or no P for an extra slot.
		p.n, p.frac = int(n), 0
		return false
	}
	p.n, p.frac, p.period, p.cpus = int(n), frac, l.Period, b.Affinity
	p.occupancy = n + frac
	p.tickNs.Store(int64(l.Period / fracTicks))
	if p.closeUsage != nil {
		p.closeUsage()
	}
	if c := p.cgroup; c != nil {
		p.usage, p.throttled, p.closeUsage = c.Usage, c.Throttled, nil
		p.phase = phase{read: c.Periods}
	} else {
		usage, closeUsage := usageReader(l.Dir, b.CgroupVersion)
		periods, closePeriods := periodsReader(l.Dir)
		p.usage, p.closeUsage = usage, func() { closeUsage(); closePeriods() }
		p.phase = phase{read: periods}
		p.throttled = func() (uint64, bool) {
			st, err := budget.ReadStatDir(l.Dir)
			if err != nil {
				return 0, false
			}
			return st.ThrottledPeriods, true
		}
	}
	p.started, p.whole, p.settled = false, false, false
	return true
}

// slots is the slot count under this policy: n+1 and the busy slots.
func (p *Pacer) Slots() int { return p.n + 1 + p.extra }

// capacity is the slots that serve the queue on average while the extra
// slot is paced, 0 when nothing is paced: the slots held on average while
// a task queued (occupancy), between n and n+1; n + frac until that was
// measured.
//
// The door divides the expected run time of the work queued by it. By
// Little's law the slots complete held/W tasks per second, W being a
// task's time on its slot, which is what the run times are measured as.
// Where tasks give the extra slot back at a Checkpoint when it closes,
// the slots held average about n + frac and W is the task's CPU time;
// where they cannot (cgo, a third-party library's loop), the extra slot
// stays held through its closes and the kernel throttles the cgroup, so
// W counts the frozen time too and the held slots are near n+1
// (docs/architecture.md, "Slots").
func (p *Pacer) Capacity() float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.capacityLocked()
}

func (p *Pacer) capacityLocked() float64 {
	if p.frac == 0 {
		return 0
	}
	return min(max(p.occupancy, float64(p.n)), float64(p.n+1+p.extra))
}

// occupancySample folds the slots held now into occupancy when a task is
// queued, weighted by dt (ns since the last step) over one period.
// It also counts the period's ticks and those with every open slot held
// or a task queued (the door may hold the queue near empty while the
// slots stay full), for busyLocked: one read of the slots per step.
func (p *Pacer) occupancySample(dt float64) {
	held, queued := p.host.Occupied()
	p.ticks++
	open := int64(p.n + p.extra)
	if p.open {
		open++
	}
	if queued || held >= open {
		p.fullTicks++
	}
	if !queued {
		return
	}
	a := min(1, dt/float64(p.period))
	p.occupancy += (float64(held) - p.occupancy) * a
	p.host.SetPacedCapacity(p.capacityLocked())
}

// capNs is the bucket's cap.
func (p *Pacer) capNs() float64 { return float64(p.period) / fracCapDivisor }

// step updates the bucket at time t (the clock's ns) and opens or closes the
// extra slot.
func (p *Pacer) step(t int64) {
	p.mu.Lock()
	was := p.unpaceable
	p.stepLocked(t)
	warn := !was && p.unpaceable
	held, periods := p.winHeld, p.winPeriods
	p.mu.Unlock()
	if warn {
		p.host.Unpaceable(held, periods)
	}
}

// stepLocked is step with mu held.
func (p *Pacer) stepLocked(t int64) {
	p.lastStep.Store(t)
	if p.stopped {
		return
	}
	if p.frac == 0 {
		p.setSpentLocked(false)
		p.setOpenLocked(true)
		return
	}
	u, err := p.usage()
	if err != nil {
		return // keep the state: the next readable tick decides
	}
	if !p.started {
		p.started, p.lastT, p.lastU, p.periodT, p.periodU = true, t, int64(u), t, int64(u)
		p.tokens = p.capNs() / 2
		return
	}
	dt, du := float64(t-p.lastT), float64(int64(u)-p.lastU)
	closed := !p.open // through the tick that ends now
	stuck := closed && p.host.OverCommitted()
	if closed {
		p.closedTotal += t - p.lastT
	}
	switch {
	case stuck:
		p.stuckNs += t - p.lastT
	case p.settled:
		// A stretch of ticks closed: its use is judged as a whole, since
		// the usage counter charges a running thread's time at the
		// kernel's tick, late by up to one (4 ms at HZ=250), which over
		// a single 2 ms tick looks like a second core.
		p.overNs += du - (float64(p.n)+p.frac)*dt
		p.stretchNs += dt
		if p.stretchNs >= fracStretchTicks*float64(p.tickNs.Load()) && p.overNs > fracSlackCores*p.stretchNs {
			p.closedOver = true
		}
	}
	if !p.settled {
		p.overNs, p.stretchNs = 0, 0
	}
	p.occupancySample(dt)
	pace := p.target
	if p.whole {
		pace = 1
	}
	phaseOpen, phased := p.phaseOpenLocked(t, int64(u), p.lastT, p.lastU, stuck, p.settled, pace)
	p.lastT, p.lastU = t, int64(u)
	p.tokens += pace*(float64(p.n)+p.frac)*dt - du
	p.tokens = min(p.tokens, p.capNs())
	p.tokens = max(p.tokens, -fracDebtCaps*p.capNs()) // a bounded debt (fracDebtCaps)
	if t-p.periodT >= int64(p.period) {
		p.periodLocked(t, int64(u))
	}
	if !phased {
		phaseOpen = p.tokens > 0
	}
	p.paceLocked(phaseOpen)
	// The next tick runs with the extra slot's close in effect only when
	// the slot was closed through this one too and nothing ran over the
	// count at its end: the tick after a close holds the overshoot of
	// the task that runs on to its Checkpoint, which is the pacer's own.
	p.settled = closed && !stuck && !p.open
}
