package pacer

import (
	"path/filepath"

	"github.com/cpuwork/cpuwork/internal/cgroupfs"
)

// The period's phase. The kernel refills a cgroup's quota at the start of
// each period, on a fixed grid (a restarted period timer is forwarded on
// it), and throttles the cgroup only when one period's use passes the
// quota (Documentation/scheduler/sched-bwc.rst). Where the cgroup's
// cpu.stat counts the periods (nr_periods), a step sees each boundary
// within a tick, and the extra slot is paced within the kernel's period:
// it stays open while
//
//	used + rate·remaining + reserve + lag < pace·q·period
//
// (used: the cgroup's use since the boundary; remaining: the period's time
// left; rate: what the cgroup uses with the extra slot closed — the n
// always-open slots, or more where work outside the executor runs beside
// them, as measured in the last periods' closed stretches; reserve: what a
// task kept running past the last closes, both smoothed; lag: one tick
// at n+1 cores, as the usage counter is charged at the kernel's ticks). A burst the period's quota
// covers keeps every slot open, as the kernel would, where the bucket (for
// any phase) closes the extra slot once its cap of period/50 is spent: at
// moderate load the bucket closed it a fifth of the time with the quota a
// quarter unused, queueing requests behind a closed slot. A saturated
// period runs n+1 slots first and n after, the same total as the bucket's.
// Without the count (unreadable, or a test's fake cgroup) the bucket paces.

// phase is the pacer's view of the kernel's period.
type phase struct {
	read   func() (uint64, bool) // cumulative nr_periods; nil: not known
	nr     uint64
	haveNr bool
	// known: a boundary was seen; startT and startU are its time and the
	// cgroup's usage then (ns).
	known          bool
	startT, startU int64
	// stuck is the time, in this period, the extra slot was closed while
	// a task still ran over the count; reserve smooths it over periods.
	stuck   int64
	reserve float64
	// closedU and closedT sum, in this period, the use and the time of
	// the ticks run with the close in effect; rate smooths their ratio
	// over periods (cores; 0 until measured).
	closedU, closedT int64
	rate             float64
	haveRate         bool
}

// phaseReserveGain is the weight of a period's overshoot in reserve;
// phaseRateGain that of a period's closed stretch in rate (the first sets
// it: work outside the executor throttles every period until it is
// known: until then the bucket paces).
const (
	phaseReserveGain = 0.25
	phaseRateGain    = 0.5
)

// phaseOpenLocked decides the extra slot from the period's phase at a step
// at t, usage u, after the step at lastT, lastU; stuck reports the tick
// that ends now was closed with a task over the count. ok is false when
// the phase is not known: the bucket decides. settled reports it ran with
// the close in effect (closed through the tick before it, nothing over
// the count).
func (p *Pacer) phaseOpenLocked(t, u, lastT, lastU int64, stuck, settled bool, pace float64) (open, ok bool) {
	ph := &p.phase
	if ph.read == nil || p.frac >= 1 {
		// QuotaStrict's paced whole slot gives way to work outside the
		// executor, which comes when it comes: the bucket tracks it.
		return false, false
	}
	period, tick := int64(p.period), p.tickNs.Load()
	if stuck {
		ph.stuck += t - lastT
	}
	if settled {
		ph.closedU += u - lastU
		ph.closedT += t - lastT
	}
	// Between boundaries the count cannot change: read it only near the
	// next one (or when the phase is not known).
	if !ph.known || t >= ph.startT+period-tick {
		nr, readable := ph.read()
		switch {
		case !readable:
			ph.known, ph.haveNr = false, false
			return false, false
		case !ph.haveNr:
			ph.nr, ph.haveNr = nr, true
		case nr != ph.nr:
			// A boundary in (lastT, t]: taken at the tick's middle.
			ph.nr = nr
			if ph.known {
				ph.reserve += (float64(ph.stuck) - ph.reserve) * phaseReserveGain
				if ph.closedT >= 4*tick {
					r := float64(ph.closedU) / float64(ph.closedT)
					if !ph.haveRate {
						ph.rate, ph.haveRate = r, true
					}
					ph.rate += (r - ph.rate) * phaseRateGain
				}
			}
			ph.stuck, ph.closedU, ph.closedT = 0, 0, 0
			ph.known, ph.startT, ph.startU = true, (lastT+t)/2, (lastU+u)/2
		case ph.known && t-ph.startT >= period+2*tick:
			// No period counted for more than one: the kernel's timer
			// idled with the cgroup and restarts on the same grid.
			ph.startT += (t - ph.startT) / period * period
			ph.startU, ph.stuck, ph.closedU, ph.closedT = lastU, 0, 0, 0
		}
	}
	if !ph.known || !ph.haveRate {
		// Until a closed stretch has measured the rate, the bucket
		// paces: it closes early in a saturated period and measures it.
		return false, false
	}
	q := float64(p.n) + p.frac
	used := float64(u - ph.startU)
	remaining := float64(max(0, ph.startT+period-t))
	rate := max(float64(p.n), ph.rate)
	lag := float64(p.n+1) * float64(tick)
	return used+rate*remaining+ph.reserve+lag < pace*q*float64(period), true
}

// periodsReader returns a reader of dir/cpu.stat's nr_periods (the file
// kept open), or nil when it cannot be opened.
func periodsReader(dir string) (read func() (uint64, bool), closeFn func()) {
	if dir == "" {
		return nil, func() {}
	}
	readFile, closeFn, err := preadFile(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		return nil, func() {}
	}
	read = func() (uint64, bool) {
		var nr uint64
		err := readFile(func(b []byte) error {
			s, err := cgroupfs.ParseCPUStat(b)
			nr = s.Periods
			return err
		})
		return nr, err == nil
	}
	return read, closeFn
}
