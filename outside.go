package cpuwork

import (
	"math"
	"runtime/metrics"
	"time"

	"github.com/cpuwork/cpuwork/budget"
	"github.com/cpuwork/cpuwork/internal/cputime"
	"github.com/cpuwork/cpuwork/schedstat"
)

// Work outside the Go scheduler's Ps.
//
// A slot is capped at GOMAXPROCS because Go code needs a P to run: more
// slots than Ps only time-slice the Ps. A task inside a cgo call (libvips,
// ONNX Runtime, zstd) or a system call holds no P — the runtime hands the
// P off — so GOMAXPROCS does not bound the CPU such tasks use; the CPU
// budget does. A server that sets GOMAXPROCS below its quota (automaxprocs
// rounds a quota down: 1 for 1.5 CPUs) would otherwise leave part of the
// quota idle behind slots capped at GOMAXPROCS.
//
// The executor tells the two apart by what it measures, while GOMAXPROCS
// is what caps its slots below the budget: every outsideTick it reads
// runtime/metrics' /sched/goroutines/not-in-go (goroutines running or
// blocked in a cgo or system call; O(GOMAXPROCS) under the scheduler's
// lock) beside the slots held. Over a window of outsideWindow samples, the
// share of held slots that were outside Go (a server's process is
// often new, so a window is short: 100 ms), sum(min(not-in-go, held)) /
// sum(held), decides: at outsideOn or more the slots follow the CPU budget
// as if GOMAXPROCS were not known (ceil(quota) with the last slot paced,
// or the budget's whole cores); below outsideOff they go back to
// GOMAXPROCS. Windows in which slots were held in fewer than outsideMinHeld
// samples decide nothing. Goroutines blocked in other system calls (a file
// read outside any task) count too, which is why the share is capped by
// the slots held and needs a majority.

const (
	outsideTick    = 5 * time.Millisecond
	outsideWindow  = 20  // samples per decision (100 ms at outsideTick)
	outsideMinHeld = 10  // samples with a slot held for a window to decide
	outsideOn      = 0.5 // share of held slots outside Go that lifts the cap
	outsideOff     = 0.2 // share under which the cap returns
	notInGoMetric  = "/sched/goroutines/not-in-go:goroutines"
)

// outsidePs is the detector's state, owned by the budget watcher's
// goroutine.
type outsidePs struct {
	on             bool
	decided        bool // a window has decided (on or off)
	n, heldSamples int
	held, out      int64
	sample         []metrics.Sample
}

// capped reports whether GOMAXPROCS, not the CPU budget, bounds b's slots:
// the budget allows more slots (ceil of a fractional quota, or the whole
// cores) than GOMAXPROCS.
func capped(b budget.Budget) bool {
	if b.GOMAXPROCS <= 0 {
		return false
	}
	return int(math.Ceil(b.Cores-0.01)) > b.GOMAXPROCS
}

// step folds one sample (held: slots held now) in and reports whether the
// decision changed at the end of a window.
func (o *outsidePs) step(held int64) bool {
	if o.sample == nil {
		o.sample = []metrics.Sample{{Name: notInGoMetric}}
	}
	if held > 0 {
		metrics.Read(o.sample)
		var notInGo int64
		if o.sample[0].Value.Kind() == metrics.KindUint64 {
			notInGo = int64(o.sample[0].Value.Uint64())
		}
		o.held += held
		o.out += min(notInGo, held)
		o.heldSamples++
	}
	o.n++
	if o.n < outsideWindow {
		return false
	}
	decide := o.heldSamples >= outsideMinHeld
	share := 0.0
	if o.held > 0 {
		share = float64(o.out) / float64(o.held)
	}
	o.n, o.heldSamples, o.held, o.out = 0, 0, 0, 0
	if !decide {
		return false
	}
	o.decided = true
	switch {
	case !o.on && share >= outsideOn:
		o.on = true
		return true
	case o.on && share < outsideOff:
		o.on = false
		return true
	}
	return false
}

// effective is b as the slot count uses it: while the tasks run outside
// Ps, GOMAXPROCS is not their bound.
func (o *outsidePs) effective(b budget.Budget) budget.Budget {
	if o.on {
		b.GOMAXPROCS = 0
	}
	return b
}

// processCPU is this process's CPU time (user and system), 0 if
// unreadable.
func processCPU() time.Duration {
	d, _ := cputime.Process()
	return d
}

// processRunDelay is the process's cumulative kernel run delay, summed
// over its threads (false where it cannot be read).
func processRunDelay() (time.Duration, bool) {
	th, err := schedstat.ReadThreads(0)
	if err != nil {
		return 0, false
	}
	return th.RunDelay, true
}
