// Package pacing holds what a cpuwork executor reports of the pacer of a
// fractional CPU quota (cpuwork.Stats.Pacing, cpuwork.PacingStats):
// under a CFS quota of q cores with a fraction (1.5), ceil(q) slots run of
// which the last is open only while the quota's cgroup uses less than
// Target x q, or, where the latency objective absorbs the pause a
// throttled period causes, kept open and the kernel left to throttle.
package pacing

import "time"

// Stats reports the fractional slot's pacer (cpuwork.Options.Quota). All
// zero when nothing is paced.
type Stats struct {
	Paced bool // a fractional quota's extra slot is paced now
	// Target is the share of the quota the pacer lets the cgroup use (0.5
	// to 0.97): lowered 5 % by each throttled period it could have
	// prevented, raised 0.005 by each clean one.
	Target float64
	// Closed is the total time the extra slot was closed.
	Closed time.Duration
	// Lowered counts the throttled periods that lowered Target; Held
	// those that left it, the throttle not being the extra slot's doing
	// (a task that could not give its slot back, or the always-open slots
	// over the quota by themselves).
	Lowered, Held uint64
	// Occupancy is the slots held on average while a task queued, over
	// about the last period (floor(q) to ceil(q)): the door divides the
	// expected run time of the queued work by it.
	Occupancy float64
	// Pause is the longest pause a throttled CFS period causes the
	// process (the quota spent by its open slots at once, every thread
	// then frozen for the rest of the period); Objective the tightest
	// latency objective of the work queued in the last two periods (0:
	// none known). Absorbed: the objective absorbs the pause (it is
	// longer than the pause), so the extra slot is kept open and the
	// quota used whole, the kernel left to throttle; without an
	// objective, or under QuotaStrict, it never is.
	Pause, Objective time.Duration
	Absorbed         bool
	// Warning, when not empty, says that the pacer cannot keep the cgroup
	// under its quota (a quarter or more of a window of periods were
	// Held) and what to set; it is also logged once.
	Warning string
}
