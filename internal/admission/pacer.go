package admission

import (
	"math"
	"time"
)

// Pacer is the core as the fractional quota's pacer sees it
// (Granter.Pacer): the extra slot it opens and closes, the capacity and
// budget it reports to the door, and what it reads (the slots held, the
// tightest objective queued, whether a class sheds). Nothing else in
// the executor calls these.
type Pacer Granter

// Pacer is g's pacer seam.
func (g *Granter) Pacer() *Pacer { return (*Pacer)(g) }

// SetPacedCapacity records the slots that serve the queue on average
// under a paced fractional quota (0: none), for the door's estimate.
func (p *Pacer) SetPacedCapacity(c float64) { p.pacedCap.Store(math.Float64bits(c)) }

// OverCommitted is Granter.OverCommitted.
func (p *Pacer) OverCommitted() bool { return (*Granter)(p).OverCommitted() }

// SetBudgetSpent says whether the CPU budget is spent for now: the
// fractional quota's pacer would close its extra slot (the period's
// quota is on pace to be used) or the last period was throttled.
func (p *Pacer) SetBudgetSpent(spent bool) {
	(*Granter)(p).budgetSpent.Store(spent)
}

// SetQuota gives the CPU quota's cores while the fractional quota's
// extra slot is kept open and the kernel throttles the cgroup once the
// quota is spent (0: the slot is paced, or there is no quota). Slots
// beyond the quota may then idle part of each period at no cost to the
// work done: the hold of a shedding class counts that share of free
// slots as none (queueController.moveHold).
func (p *Pacer) SetQuota(cores float64) { p.quotaCores.Store(math.Float64bits(cores)) }

// Shedding reports whether any class sheds now in a clear overload (its
// arrivals brought over earlyOutrun times the slots' work, in its last
// interval and over the recent ones).
func (p *Pacer) Shedding() bool {
	return (*Granter)(p).sheddingMask.Load() != 0
}

// Objective is the tightest latency objective (WithTarget, a class's
// LatencyTarget, a ctx deadline, counted from arrival) of the tasks that
// queued in this window or the last one; 0 when none had one. With turn,
// a new window starts (the pacer turns one each CFS period).
func (p *Pacer) Objective(turn bool) time.Duration {
	g := (*Granter)(p)
	w := g.objectiveWin.Load()
	a, b := g.objective[w&1].Load(), g.objective[(w+1)&1].Load()
	if turn {
		g.objective[(w+1)&1].Store(0)
		g.objectiveWin.Add(1)
	}
	switch {
	case a == 0:
		return time.Duration(b)
	case b == 0:
		return time.Duration(a)
	}
	return time.Duration(min(a, b))
}

// Occupied reports the slots held now (the capacity less the free count,
// so a task over the count while the extra slot is closed counts) and
// whether a task is queued: the fractional pacer's occupancy sample.
func (p *Pacer) Occupied() (held int64, queued bool) {
	g := (*Granter)(p)
	free, capacity := unpackSlots(g.free.v.Load())
	return capacity - free, g.waitMask.Load() != 0
}

// SetExtraOpen opens or closes the fractional quota's extra slot.
func (p *Pacer) SetExtraOpen(open bool) {
	g := (*Granter)(p)
	t := g.clockFor()
	g.lock()
	if open != !g.extraClosed {
		g.setCapacityLocked(g.slots, !open, t)
	}
	g.unlockAndWake(nil)
}
