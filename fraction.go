package cpuwork

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cpuwork/cpuwork/budget"
	"github.com/cpuwork/cpuwork/internal/cgroupfs"
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
// spent (measured in docs/architecture.md, "Whole quotas"):
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
//     class (order.go);
//   - the period's phase is not needed: the bucket keeps the usage of every
//     window of one period, whatever its start, under target·q·period plus
//     the cap and one task's overshoot past the close (the margin, 3 % of
//     the quota at the highest target: 3.75 ms of a 1.25-core quota per
//     100 ms, holds the 2 ms cap and a close one tick late at 0.8 cores over the pace;
//     fraction_test.go checks every phase with tasks that run on up to
//     2 ms past a close), so the kernel's period
//     (whose phase can be read from nr_periods but is not needed here,
//     docs/architecture.md "Whole quotas") stays under the quota too;
//   - once per period nr_throttled of cpu.stat is read: a newly throttled
//     period lowers target by 5 % (to 0.5 at least), a clean one raises it
//     by 0.005 (to 0.97 at most).
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
)

// fracPacer opens and closes the extra slot. Its clock and counters are
// injectable for tests.
type fracPacer struct {
	mu     sync.Mutex
	n      int     // floor(quota): slots always open
	frac   float64 // quota - n; 0: nothing to pace
	strict bool    // QuotaStrict: whole quotas paced too
	period time.Duration
	target float64
	tokens float64 // ns of CPU the process may still use above its pace
	// closed is how many slots are closed now (the token bucket: 0 or 1,
	// the extra slot; period-aligned: 0 to n+1); setClosed is the
	// executor's callback, called with mu held on every change.
	closed    int
	setClosed func(closed int)

	// Period-aligned pacing (QuotaStrict on a whole quota; below).
	periodic    bool
	stat        func() (periods, throttled uint64, ok bool) // cumulative nr_periods, nr_throttled
	held        func() int                                  // slots held or closed now (executor: slots - free)
	outside     float64                                     // cores used outside the slots, moving average
	closeLag    float64                                     // ns a closed slot's task runs on, moving average
	overSince   int64                                       // now() since which more slots run than are open (0: none)
	lastBusy    int                                         // slots running at the last step
	events      func() uint64                               // tasks started, ended or handed over so far (executor)
	lastEvents  uint64
	periodStart int64                                       // now() at the current period's start (the earliest it can have been)
	periodEnd   int64                                       // now() at its end (the latest it can be)
	uStart      int64                                       // usage at periodStart
	lastPeriods uint64
	closeStat   func()

	usage     func() (time.Duration, error) // cumulative CPU of the cgroup (or process)
	throttled func() (uint64, bool)         // cumulative nr_throttled, if readable

	lastT, lastU       int64 // at the last step
	periodT            int64 // start of the current feedback period
	lastThrot          uint64
	haveThrot, started bool
	lastStep           atomic.Int64 // now() of the last step, for maybeStep
	tickNs             int64
	closeUsage         func()
}

// newFracPacer returns the pacer of b's quota, or nil when b has no
// fractional quota. setOpen is the executor's callback.
func newFracPacer(b budget.Budget, strict bool, setClosed func(int)) *fracPacer {
	p := &fracPacer{target: fracTargetMax, setClosed: setClosed, strict: strict}
	if !p.configure(b) {
		return nil
	}
	return p
}

// configure reads n, frac, the period and the usage source from b; it
// reports whether b has a fractional quota.
func (p *fracPacer) configure(b budget.Budget) bool {
	l, ok := b.Limiting()
	if !ok || l.Period <= 0 {
		p.n, p.frac, p.periodic = budget.Whole(b.Cores, false), 0, false
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
		p.n, p.frac, p.periodic = int(n), 0, false
		return false
	case frac < 0.01 && p.strict && b.GOMAXPROCS > int(n):
		// A whole quota with a P beyond the slots (Go's default gives a
		// 1-CPU quota 2 Ps, runtime/cgroup_linux.go): goroutines outside
		// the executor (handlers, GC workers) run beside full slots and
		// take the process over its quota. Period-aligned pacing: q+1
		// slots, as many open as the period's quota left can pay for
		// (below).
		p.periodic, frac = true, 1
	case frac < 0.01 || (b.GOMAXPROCS > 0 && int(n)+1 > b.GOMAXPROCS):
		// Whole with no P to spare (the slots' own use cannot pass the
		// quota); or no P for an extra slot.
		p.n, p.frac, p.periodic = int(n), 0, false
		return false
	}
	if frac < 1 {
		p.periodic = false
	}
	p.n, p.frac, p.period = int(n), frac, l.Period
	p.tickNs = int64(l.Period / fracTicks)
	if p.closeUsage != nil {
		p.closeUsage()
	}
	p.usage, p.closeUsage = usageReader(l.Dir, b.CgroupVersion)
	if p.closeStat != nil {
		p.closeStat()
	}
	p.stat, p.closeStat = statReader(l.Dir)
	p.throttled = func() (uint64, bool) {
		st, err := budget.ReadStatDir(l.Dir)
		if err != nil {
			return 0, false
		}
		return st.ThrottledPeriods, true
	}
	p.started = false
	return true
}

// slots is the slot count under this policy: n+1.
func (p *fracPacer) slots() int { return p.n + 1 }

// capNs is the bucket's cap.
func (p *fracPacer) capNs() float64 { return float64(p.period) / fracCapDivisor }

// step updates the bucket at time t (now() ns) and opens or closes the
// extra slot.
func (p *fracPacer) step(t int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lastStep.Store(t)
	if p.frac == 0 {
		p.setOpenLocked(true)
		return
	}
	if p.periodic {
		p.stepPeriodicLocked(t)
		return
	}
	u, err := p.usage()
	if err != nil {
		return // keep the state: the next readable tick decides
	}
	if !p.started {
		p.started, p.lastT, p.lastU, p.periodT = true, t, int64(u), t
		p.tokens = p.capNs() / 2
		return
	}
	dt, du := float64(t-p.lastT), float64(int64(u)-p.lastU)
	p.lastT, p.lastU = t, int64(u)
	p.tokens += p.target*(float64(p.n)+p.frac)*dt - du
	p.tokens = min(p.tokens, p.capNs())
	p.tokens = max(p.tokens, -p.frac*float64(p.period)) // a bounded debt
	if t-p.periodT >= int64(p.period) {
		p.periodT = t
		p.feedbackLocked(p.throttled())
	}
	p.setOpenLocked(p.tokens > 0)
}

// Period-aligned pacing: QuotaStrict on a whole quota q with a P beyond
// it (Go's default gives a 1-CPU quota 2 Ps). The kernel refills a
// cgroup's quota at the start of each period, on a fixed grid (the period
// timer is forwarded by whole periods: start_cfs_bandwidth in
// kernel/sched/fair.c), and freezes every thread of it once the period's
// usage reaches the quota (Documentation/scheduler/sched-bwc.rst). So the
// pacer follows the periods themselves rather than a sliding window:
//
//   - every tick it reads the cgroup's usage (usageReader) and nr_periods
//     of its cpu.stat (one pread each); a step that sees nr_periods grow
//     starts a new period, counted from the step before it (the earliest
//     the boundary can have been, so the period's usage is never
//     undercounted); where the counter stands still (an idle cgroup's
//     period timer stops) the next boundary is predicted one period on;
//   - outside is the cores the process uses beyond one per held slot
//     (handlers, GC, the runtime), sampled between steps that see the
//     same slots held (a step at a task's end would undercount the
//     slots' use and count it as outside: 0.7-0.9 cores estimated where
//     handlers used about 0.15 in the inference scenario's 1-CPU case)
//     and with no task started, ended or handed over in between; a
//     moving average that rises over about a quarter period and falls
//     over half a one (bursty handlers are not underestimated);
//   - room = target·q·period − the period's usage − outside·left, where
//     left is the time to the period's end: the quota the slots may still
//     use this period once the rest of the process has had its share;
//   - of the q+1 slots, the k-th is open while room ≥ (k−1)·left +
//     k·margin, where margin is 2 ticks plus closeLag, how long a task on a
//     closed slot has been running on to its next Checkpoint (a For loop:
//     its chunk's end; a moving average of the measured stretches with
//     more slots held than open): the first q run while any room is left, and the extra one
//     only while the quota left would pay for the others to the period's
//     end (after an idle stretch the work runs on q+1 cores, as unpaced,
//     without eating into what the base slots need later). Near the end of
//     a busy period every slot closes and waits for the next one, while
//     handlers, the netpoller and the GC go on: the kernel freezes
//     nothing;
//   - what a closing task uses past its margin, and a wrong outside,
//     show up as throttled periods, which lower target by 5 %
//     each (to 0.5 at least), while every clean period raises it by 0.005
//     (to 0.97 at most).
//
// Tests: fraction_period_test.go (a kernel-like period grid at any phase)
// and TestQuotaStrictSlotGivesWayInARealCgroup.
func (p *fracPacer) stepPeriodicLocked(t int64) {
	u, err := p.usage()
	if err != nil {
		return // keep the state: the next readable tick decides
	}
	periods, throttled, ok := p.stat()
	if !p.started {
		p.started, p.lastT, p.lastU = true, t, int64(u)
		p.periodStart, p.uStart, p.periodEnd, p.lastPeriods = t, int64(u), t+int64(p.period), periods
		p.lastThrot, p.haveThrot = throttled, ok
		return
	}
	dt, du := t-p.lastT, int64(u)-p.lastU
	if dt <= 0 {
		return
	}
	busy := 0
	if p.held != nil {
		busy = max(0, p.held()-p.closed)
	}
	var events uint64
	if p.events != nil {
		events = p.events()
	}
	if busy == p.lastBusy && events == p.lastEvents {
		// Only a step with the same slots held as the last one and no
		// task started, ended or handed over in between: otherwise a
		// task ran for an unknown part of the interval (and steps come
		// at tasks' ends, so the slots held at a step undercount it).
		sample := min(max(0, float64(du)/float64(dt)-float64(busy)), float64(p.n+1))
		w := float64(p.period) / 2 // a rise weighs in over a quarter period, a fall over half a one
		if sample > p.outside {
			w /= 2
		}
		p.outside += min(1, float64(dt)/w) * (sample - p.outside)
	}
	p.lastBusy, p.lastEvents = busy, events
	switch over := busy > p.n+1-p.closed; {
	case over && p.overSince == 0:
		p.overSince = p.lastT // closed at the last step
	case !over && p.overSince != 0:
		p.closeLag += (float64(t-p.overSince) - p.closeLag) / 4
		p.overSince = 0
	}
	period := int64(p.period)
	switch {
	case ok && periods != p.lastPeriods:
		// A boundary since the last step: its usage counts from the step
		// before (the earliest it can have been), its end one period
		// after this step (the latest), so neither the usage nor the time
		// left is undercounted.
		p.periodStart, p.uStart, p.periodEnd = p.lastT, p.lastU, t+period
		p.lastPeriods = periods
		p.feedbackLocked(throttled, ok)
	case t >= p.periodEnd+period/4 || !ok && t >= p.periodEnd:
		// No boundary seen: an idle cgroup's period timer stops (the
		// quota is full when it starts again), or cpu.stat is unreadable.
		// A boundary is predicted one period on. While the cgroup is busy
		// nr_periods grows at every boundary, and the slots wait for it.
		p.periodStart, p.uStart = p.lastT, p.lastU
		p.periodEnd += (t - p.periodEnd + period) / period * period
	}
	p.lastT, p.lastU = t, int64(u)
	left := float64(max(0, p.periodEnd-t))
	q := float64(p.n)
	room := p.target*q*float64(period) - float64(int64(u)-p.uStart) - p.outside*left
	open, margin := 0, 2*float64(p.tickNs)+p.closeLag
	for k := 1; k <= p.n+1 && room >= float64(k-1)*left+float64(k)*margin; k++ {
		open = k
	}
	p.setClosedLocked(p.n + 1 - open)
}

// feedbackLocked moves target on a new period: down 5 % when nr_throttled
// grew since the last one, up 0.005 when it did not.
func (p *fracPacer) feedbackLocked(throttled uint64, ok bool) {
	if !ok {
		return
	}
	switch {
	case p.haveThrot && throttled > p.lastThrot:
		p.target = max(fracTargetMin, p.target*0.95)
	case p.haveThrot:
		p.target = min(fracTargetMax, p.target+0.005)
	}
	p.lastThrot, p.haveThrot = throttled, true
}

// statReader returns a reader of nr_periods and nr_throttled of
// dir/cpu.stat (v1 and v2), kept open and read with pread; ok is false
// where it cannot be read (then periods are predicted and target stays).
func statReader(dir string) (read func() (periods, throttled uint64, ok bool), closeFn func()) {
	none := func() (uint64, uint64, bool) { return 0, 0, false }
	if dir == "" {
		return none, func() {}
	}
	f, err := os.Open(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		return none, func() {}
	}
	buf := make([]byte, 4096)
	var mu sync.Mutex
	read = func() (uint64, uint64, bool) {
		mu.Lock()
		defer mu.Unlock()
		n, err := f.ReadAt(buf, 0)
		if n == 0 && err != nil {
			return 0, 0, false
		}
		st, err := cgroupfs.ParseCPUStat(buf[:n])
		if err != nil {
			return 0, 0, false
		}
		return st.Periods, st.ThrottledPeriods, true
	}
	return read, func() { f.Close() }
}

func (p *fracPacer) setClosedLocked(k int) {
	if k != p.closed {
		p.closed = k
		p.setClosed(k)
	}
}

func (p *fracPacer) setOpenLocked(open bool) {
	if open {
		p.setClosedLocked(0)
	} else {
		p.setClosedLocked(1)
	}
}

// maybeStep steps when the last step is more than a tick old: called at
// a task's end, so the extra slot is closed in time even while the ticker
// goroutine waits for a P.
func (p *fracPacer) maybeStep() {
	t := now()
	if last := p.lastStep.Load(); t-last >= p.tickNs && p.lastStep.CompareAndSwap(last, t) {
		p.step(t)
	}
}

// reconfigure follows a budget change (a new quota or period, or none).
func (p *fracPacer) reconfigure(b budget.Budget) {
	p.mu.Lock()
	ok := p.configure(b)
	if !ok {
		p.frac = 0
		p.setOpenLocked(true)
	}
	p.mu.Unlock()
}

func (p *fracPacer) run(done <-chan struct{}) {
	t := time.NewTimer(p.nextTick())
	defer t.Stop()
	for {
		select {
		case <-done:
			p.mu.Lock()
			p.setOpenLocked(true)
			if p.closeUsage != nil {
				p.closeUsage()
				p.closeUsage = nil
			}
			if p.closeStat != nil {
				p.closeStat()
				p.closeStat = nil
			}
			p.mu.Unlock()
			return
		case <-t.C:
			p.step(now())
			t.Reset(p.nextTick())
		}
	}
}

// nextTick is the wait until the next step: a tick while the extra slot
// is open, a quarter of one while it is closed, so that it reopens soon
// after the bucket refills (waiting out whole ticks closed, a paced
// 1-CPU quota's slot used 0.92-0.93 of the quota in
// TestQuotaStrictSlotGivesWayInARealCgroup; 0.94-0.95 with quarter ticks).
func (p *fracPacer) nextTick() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	tick := time.Duration(p.tickNs)
	if tick <= 0 {
		tick = 2 * time.Millisecond
	}
	if p.closed > 0 {
		tick /= fracClosedTicks
	}
	return tick
}

// usageReader returns a reader of the cumulative CPU usage of the cgroup
// directory dir: v2 cpu.stat usage_usec, v1 cpuacct.usage (ns) where
// cpuacct is mounted with cpu; else the process's own CPU time (right
// when the process is alone in its cgroup). The file stays open and is
// read with pread (one system call per read).
func usageReader(dir string, version int) (read func() (time.Duration, error), closeFn func()) {
	fallback := func() (time.Duration, error) { return processCPU(), nil }
	if dir == "" {
		return fallback, func() {}
	}
	name, parse := "cpuacct.usage", func(b []byte) (time.Duration, error) {
		v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 63)
		return time.Duration(v), err
	}
	if version == 2 {
		name, parse = "cpu.stat", func(b []byte) (time.Duration, error) {
			for _, line := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
					us, err := strconv.ParseUint(strings.TrimSpace(v), 10, 53)
					return time.Duration(us) * time.Microsecond, err
				}
			}
			return 0, os.ErrNotExist
		}
	}
	f, err := os.Open(filepath.Join(dir, name))
	if err != nil {
		return fallback, func() {}
	}
	buf := make([]byte, 4096)
	var mu sync.Mutex
	read = func() (time.Duration, error) {
		mu.Lock()
		defer mu.Unlock()
		n, err := f.ReadAt(buf, 0)
		if n == 0 && err != nil {
			return 0, err
		}
		return parse(buf[:n])
	}
	return read, func() { f.Close() }
}

// setClosedSlots is the quota pacer's callback: closing takes slots out
// of the free count (it may go negative: a task over the count hands its
// slot back at its next Checkpoint); opening gives them back and admits
// the next waiters. Called with the pacer's lock held.
func (e *Executor) setClosedSlots(k int) {
	e.mu.Lock()
	d := k - e.closedSlots
	e.closedSlots = k
	e.free.Add(int64(-d))
	if d < 0 {
		e.dispatchLocked()
		e.unlockAndWake()
		return
	}
	e.mu.Unlock()
}

// heldSlots is the quota pacer's count of slots held or closed now.
func (e *Executor) heldSlots() int { return int(e.nslots.Load() - e.free.Load()) }

// slotEvents is the quota pacer's sign of slot changes: it moves when a
// task is admitted, completes or hands its slot over at a Checkpoint, and
// when slot time is charged (every For helper's release), all classes.
func (e *Executor) slotEvents() uint64 {
	var n uint64
	for i := range e.stats {
		s := &e.stats[i]
		n += s.admitted.Load() + s.completed.Load() + s.yields.Load() + uint64(s.used.Load())
	}
	return n
}
