// Package throttle is the one model of what a CFS throttle costs a
// latency objective, shared by the executor's pacer (whether to keep a
// fractional quota's extra slot under the quota: Misses) and the doctor
// (whether the throttling it measured is a finding: Costs). Both judge
// the same pause against a latency; they differ in what acting costs: a
// finding costs nothing, pacing costs capacity in every period the
// demand passes the pace, so the pacer acts only where a pause alone
// misses the objective.
package throttle

import "time"

// Judgement thresholds: a pause costs an objective when it is at least
// Min long and at least Share of the objective (a quarter: an objective
// four times the pause or more still leaves a request three quarters of
// it for its queue wait and its own run time; a tighter one is what the
// pause takes).
const (
	Min   = time.Millisecond
	Share = 0.25
)

// Pause is the longest pause a throttled CFS period can cause a process
// whose quota is quota cores when it runs on cores CPUs at once: the
// quota is spent in quota/cores of the period, and every thread of the
// cgroup then waits out the rest of it. 0 when the cores cannot spend
// the quota before the period ends (cores <= quota) or any argument is
// not positive.
func Pause(quota, cores float64, period time.Duration) time.Duration {
	if quota <= 0 || cores <= quota || period <= 0 {
		return 0
	}
	return time.Duration(float64(period) * (1 - quota/cores))
}

// Costs reports whether a pause (or a measured p99 of time spent
// throttled) of added costs a latency of latency (an objective, a
// target, or a measured p99): added is at least Min and at least Share
// of latency. A latency of 0 or less (none known) is cost by any pause
// of at least Min.
func Costs(added, latency time.Duration) bool {
	if added < Min {
		return false
	}
	return latency <= 0 || float64(added) >= Share*float64(latency)
}

// Misses reports whether a pause of pause makes a request it catches
// miss an objective of objective: the pause is at least Min and at
// least the objective (a request that arrives as the period is
// throttled waits the pause out before it can run at all). A shorter
// pause delays the requests it catches but leaves them the rest of the
// objective. An objective of 0 or less (none known) is missed by any
// pause of at least Min.
func Misses(pause, objective time.Duration) bool {
	if pause < Min {
		return false
	}
	return objective <= 0 || pause >= objective
}
