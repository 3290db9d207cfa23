package pacer

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cpuwork/cpuwork/budget"
	"github.com/cpuwork/cpuwork/internal/cputime"
	"github.com/cpuwork/cpuwork/internal/throttle"
)

// periodLocked is a step's end of a feedback period at t, usage u: the
// throttle feedback (the target, the whole-quota pace, the held count),
// the busy slots and the unpaceable window.
func (p *Pacer) periodLocked(t, u int64) {
	use := float64(u-p.periodU) / ((float64(p.n) + p.frac) * float64(t-p.periodT))
	p.periodT, p.periodU = t, u
	throttledNow := false
	held := p.held
	if n, ok := p.throttled(); ok {
		throttledNow = p.haveThrot && n > p.lastThrot // a period newly throttled
		switch {
		case throttledNow && p.forced:
			// The extra slot was held open while a class shed
			// (paceLocked): a throttle chosen, not a pacing error.
		case throttledNow && p.stuckNs > 2*p.tickNs.Load():
			// Throttled while a close took more than two ticks to
			// take effect: a task that cannot give its slot back
			// (no Checkpoint: cgo, a library's loop) overshot. A
			// lower target would not have stopped it, only left
			// the quota idle between such tasks.
			p.held++
			p.whole = true
		case throttledNow && p.closedOver:
			// Throttled, but in a tick with the extra slot closed the
			// process used more than the quota anyway: the slots that
			// are always open passed it by themselves (a task that
			// fans out over several threads, like an image library's
			// parallel resize, or work outside the executor). A lower
			// target would not have stopped that either.
			p.held++
			p.whole = true
		case throttledNow && p.whole:
			// Throttled while paced at the whole quota, with nothing
			// the pacer could not stop: the whole pace did it. Back
			// to target·q, which had not been tried in this period.
			p.whole = false
		case throttledNow:
			p.target = max(fracTargetMin, p.target*0.95)
			p.lowered++
		case p.haveThrot:
			p.target = min(fracTargetMax, p.target+0.005)
			p.whole = false
		}
		p.lastThrot, p.haveThrot = n, true
	}
	p.busyLocked(use, throttledNow, t)
	p.objective = p.host.Objective(true)
	p.stuckNs, p.closedOver = 0, false
	p.throttledLast, p.forced = throttledNow, false
	p.unpaceableLocked(p.held > held)
}

// unpaceableLocked counts a period (held: throttled by what the pacer
// could not stop) in the current window and, at the window's end, sets
// unpaceable when fracUnpaceableShare of it or more was held. The counts
// of the window that set it are kept for the warning.
func (p *Pacer) unpaceableLocked(held bool) {
	if p.unpaceable {
		return
	}
	p.winPeriods++
	if held {
		p.winHeld++
	}
	if p.winPeriods < fracUnpaceableWindow {
		return
	}
	if float64(p.winHeld) >= fracUnpaceableShare*float64(p.winPeriods) {
		p.unpaceable = true
		return
	}
	p.winPeriods, p.winHeld = 0, 0
}

// busyLocked opens one more slot after a period whose CPU use (use, a
// share of the quota) stayed fracBusyMargin under the pace while its
// slots were full nearly all of it (nine ticks in ten: every open slot
// held or a task queued, so the use is theirs) and the process's run
// delay stayed under fracBusyDelay, and closes one after a throttled
// period, one with that run delay, or one that used the quota with the
// slots mostly not full:
// admission follows the CPU the slots really use, not only how many are
// held. t is the clock's now.
func (p *Pacer) busyLocked(use float64, throttled bool, t int64) {
	if !p.busySlots || p.frac >= 1 {
		// QuotaStrict's paced whole slot keeps the process under a whole
		// quota: no slot beyond it.
		return
	}
	extra := p.extra
	under := use < p.target-fracBusyMargin && p.fullTicks*10 >= p.ticks*9 && p.ticks > 0
	switch {
	case throttled || (p.fullTicks*4 < p.ticks && use >= p.target-fracBusyMargin):
		extra = max(0, extra-1)
	case under || extra > 0:
		share, ok := p.delayShareLocked(t)
		switch {
		case ok && share > fracBusyDelay:
			extra = max(0, extra-1)
		case ok && under:
			extra = min(p.n+1, extra+1)
		}
	}
	p.fullTicks, p.ticks = 0, 0
	if extra != p.extra {
		p.extra = extra
		p.host.SetSlots(p.n + 1 + extra)
	}
}

// delayShareLocked is the process's run delay since the last reading, as
// a share of the quota's cores over the time since it; ok is false on the
// first reading, after a stale one (over three periods old) or when the
// delay cannot be read. Without a reader it is 0.
func (p *Pacer) delayShareLocked(t int64) (share float64, ok bool) {
	if p.runDelay == nil {
		return 0, true
	}
	d, ok := p.runDelay()
	if !ok {
		return 0, false
	}
	prev, prevT, had := p.delay, p.delayT, p.haveDelay
	p.delay, p.delayT, p.haveDelay = d, t, true
	dt := t - prevT
	if !had || dt <= 0 || dt > 3*int64(p.period) || d < prev {
		return 0, false
	}
	return float64(d-prev) / float64(dt) / (float64(p.n) + p.frac), true
}

// paceLocked sets the extra slot for the next tick from the pacer's
// decision open, and tells the door the CPU budget is spent while the
// slot would close or the last period was throttled. While a class sheds
// in a clear overload (its arrivals bring over 1.5 times the slots' work)
// the slot stays open, but under QuotaStrict: the door then holds no
// queue, and a closed slot would only refuse work the period's quota
// still covers; the kernel's throttle ends the period instead. While
// the objective absorbs a throttled period's pause the door is given
// the quota's cores (SetQuota), else 0.
func (p *Pacer) paceLocked(open bool) {
	absorbed := p.absorbedLocked()
	quota := 0.0
	if absorbed {
		quota = float64(p.n) + p.frac
	}
	if quota != p.quotaTold {
		p.quotaTold = quota
		p.host.SetQuota(quota)
	}
	p.setSpentLocked(!absorbed && (!open || p.throttledLast))
	if !open && !p.strict && (absorbed || p.host.Shedding()) {
		open, p.forced = true, true
	}
	p.setOpenLocked(open)
}

// absorbedLocked reports whether the objective of the work queued
// recently absorbs the pause a throttled period causes: it is longer
// than the pause (throttle.Misses), so a request the pause catches can
// still meet it. The extra slot then stays open and the kernel may
// throttle, the quota used whole: pacing costs capacity in every period
// the demand passes the pace (the quota's margin held idle, the slot
// closed while work queues), where a throttle delays only the requests
// in its few periods; measured, wherever the objective was longer than
// the pause, pacing lengthened the p99 more than the throttles it spared
// did (docs/results.md). With no objective known, or under QuotaStrict,
// it never does.
func (p *Pacer) absorbedLocked() bool {
	if p.strict || p.objective <= 0 {
		return false
	}
	return !throttle.Misses(p.pauseLocked(), p.objective)
}

// pauseLocked is the longest pause a throttled period causes here: the
// quota spent by the open slots running at once (at most the CPUs the
// process may run on), every thread then frozen for the period's rest.
func (p *Pacer) pauseLocked() time.Duration {
	cores := float64(p.n + 1 + p.extra)
	if p.cpus > 0 {
		cores = min(cores, float64(p.cpus))
	}
	return throttle.Pause(float64(p.n)+p.frac, cores, p.period)
}

func (p *Pacer) setSpentLocked(spent bool) {
	if spent != p.spent {
		p.spent = spent
		p.host.SetBudgetSpent(spent)
	}
}

func (p *Pacer) setOpenLocked(open bool) {
	if open != p.open {
		p.open = open
		p.host.SetExtraOpen(open)
	}
}

// maybeStep steps when the last step is more than a tick old: called at
// a task's end, so the extra slot is closed in time even while the ticker
// goroutine waits for a P.
func (p *Pacer) MaybeStep() {
	t := p.now()
	if last := p.lastStep.Load(); t-last >= p.tickNs.Load() && p.lastStep.CompareAndSwap(last, t) {
		p.step(t)
	}
}

// reconfigure follows a budget change (a new quota or period, or none).
func (p *Pacer) Reconfigure(b budget.Budget) {
	p.mu.Lock()
	ok := p.configure(b)
	if !ok {
		p.frac, p.extra = 0, 0
		p.setOpenLocked(true)
	}
	p.mu.Unlock()
}

func (p *Pacer) Run(done <-chan struct{}) {
	t := time.NewTimer(p.nextTick())
	defer t.Stop()
	for {
		select {
		case <-done:
			p.mu.Lock()
			p.stopped = true
			p.setOpenLocked(true)
			if p.closeUsage != nil {
				p.closeUsage()
				p.closeUsage = nil
			}
			p.mu.Unlock()
			return
		case <-t.C:
			t.Reset(p.Tick())
		}
	}
}

// Tick steps at the clock's now and returns the wait until the next
// step: what Run does at each tick, for a host that keeps its own time
// (a replay's virtual clock) and calls it instead of Run.
func (p *Pacer) Tick() time.Duration {
	p.step(p.now())
	return p.nextTick()
}

// nextTick is the wait until the next step: a tick while the extra slot
// is open, a quarter of one while it is closed, so that it reopens soon
// after the bucket refills (waiting out whole ticks closed, a paced
// 1-CPU quota's slot used 0.92-0.93 of the quota in
// TestQuotaStrictSlotGivesWayInARealCgroup; 0.94-0.95 with quarter ticks).
func (p *Pacer) nextTick() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	tick := time.Duration(p.tickNs.Load())
	if tick <= 0 {
		tick = 2 * time.Millisecond
	}
	if !p.open {
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
	fallback := func() (time.Duration, error) { d, _ := cputime.Process(); return d, nil }
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
	readFile, closeFn, err := preadFile(filepath.Join(dir, name))
	if err != nil {
		return fallback, func() {}
	}
	read = func() (time.Duration, error) {
		var d time.Duration
		err := readFile(func(b []byte) (err error) { d, err = parse(b); return err })
		return d, err
	}
	return read, closeFn
}

// preadFile opens path to be read whole again and again with pread (one
// system call per read, the file kept open): read passes its bytes to
// parse, serialized. closeFn closes it.
func preadFile(path string) (read func(parse func([]byte) error) error, closeFn func(), err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	buf := make([]byte, 4096)
	var mu sync.Mutex
	read = func(parse func([]byte) error) error {
		mu.Lock()
		defer mu.Unlock()
		n, err := f.ReadAt(buf, 0)
		if n == 0 && err != nil {
			return err
		}
		return parse(buf[:n])
	}
	return read, func() { f.Close() }, nil
}
