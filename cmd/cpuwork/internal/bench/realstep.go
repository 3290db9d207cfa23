package bench

import (
	"fmt"
	"time"

	"github.com/cpuwork/cpuwork/cgroup"
)

// The step response of a real server: offered load steps from 80 % of the
// stock server's capacity to realStepLevels of it, and the clients give up
// after twice the objective, as clients with a deadline do.
var realStepLevels = []float64{1.4, 3}

const (
	realStepFrom  = 0.8                     // the load before the step, of capacity
	realStepAt    = 1500 * time.Millisecond // when the step comes, from the run's start
	realStepAfter = 3 * time.Second         // how long the run goes on after it
)

// realserverStepDef is tg's step-response scenario, not in the default set.
func realserverStepDef(tg realTarget) scenarioDef {
	name := tg.scenario + "-step"
	return scenarioDef{name: name, extra: true,
		desc: fmt.Sprintf("%s's step response, unconstrained and in a 1.5-CPU cgroup: offered load steps from %.0f%% of the stock server's capacity to %s of it, clients giving up after twice the objective; time until served p99 is back under the objective, the shed rate's steadiness after, CPU spent on requests whose client had gone (not in the default set: `cpuwork bench --scenario %s`)",
			tg.cmd, realStepFrom*100, levelsText(realStepLevels), name),
		variants:    tg.names,
		steps:       func(r *Runner, vs []string) int { return 2*loadSteps(r, vs, realStepLevels) + 1 },
		run:         func(r *Runner) (*Scenario, error) { return r.realserverStep(tg, name) },
		minDuration: 500 * time.Millisecond,
		budget:      480 * time.Second}
}

// levelsText is "1.4x and 3x".
func levelsText(ls []float64) string {
	s := ""
	for i, l := range ls {
		if i > 0 {
			s += " and "
		}
		s += fmt.Sprintf("%gx", l)
	}
	return s
}

// realserverStep runs every variant of the real server tg through each
// step, alternated, the stock server's capacity measured before each
// round with no step.
func (r *Runner) realserverStep(tg realTarget, name string) (*Scenario, error) {
	s := &Scenario{Name: name, Baseline: "stock", Claim: tg.claim + "; here the step response"}
	rig, undo, err := r.setUpReal(s, tg)
	defer undo()
	if rig == nil {
		return s, err
	}
	slo, costs := rig.slo, rig.costs
	r.clientTimeout = 2 * slo
	defer func() { r.clientTimeout, r.stepLoad = 0, StepLoad{} }()

	var capacity float64 // this round's, for the load before the step
	var group *cgroup.Group
	once := r.realVariantOnce(s, rig, &group)
	step := func(v *Variant, variant string, rate float64) error {
		dur := r.loadDur
		r.loadDur = realStepAt + realStepAfter
		r.stepLoad = StepLoad{From: realStepFrom * capacity, At: realStepAt}
		defer func() { r.loadDur, r.stepLoad = dur, StepLoad{} }()
		return once(v, variant, rate)
	}
	goal := 0.02 + 2*costs["large"]
	checks := func() []check { return realStepChecks(tg, realStepLevels, "", goal) }
	estimate := float64(r.slots) / rig.perReq
	cals := r.atLoads(s, tg.variants(), realStepLevels, tg.controlName(), checks,
		func(round int) calibration {
			c := r.measureCapacity(s, "stock", round, estimate, once)
			capacity = c.capacity
			return c
		}, step)
	s.Notes = append(s.Notes, fmt.Sprintf("small = %s (%s of the server's CPU, measured alone), large = %s (%s), 90/10 mix; objective %s (3x a large request's CPU); clients give up after %s; each run %s at %.0f%% of capacity, then %s at the level; served p99 read in %s windows by arrival; %s",
		tg.small, ms(costs["small"]), tg.large, ms(costs["large"]), ms(slo.Seconds()), ms(r.clientTimeout.Seconds()),
		realStepAt, realStepFrom*100, realStepAfter, stepWindow, capacityNote("stock", r.slots, cals)))
	s.Notes = append(s.Notes, fmt.Sprintf("step-response goal: served p99 back under the objective within 20 ms plus two of the longest requests' run time (%s); recovery is read to the end of a %s window, so 0 means no window after the step missed the objective", ms(goal), stepWindow))
	r.checkLoads(s, "stock", realStepLevels, cals)
	r.inQuotaCase(s, tg.variants(), func(g *cgroup.Group) { group = g }, func(qv []struct{ name, desc string }) {
		qchecks := func() []check { return realStepChecks(tg, realStepLevels, quotaSuffix(), goal) }
		qcals := r.atLoads(s, qv, realStepLevels, tg.controlName()+quotaSuffix(), qchecks,
			func(round int) calibration {
				c := r.measureCapacity(s, "stock"+quotaSuffix(), round, estimate*realserverQuota/float64(r.slots), once)
				capacity = c.capacity
				return c
			}, step)
		s.Notes = append(s.Notes, fmt.Sprintf("quota case: every server in a %.1f-CPU cgroup (GOMAXPROCS from Go's default for it: 2); %s", realserverQuota, capacityNote("stock"+quotaSuffix(), r.slots, qcals)))
		r.checkLoads(s, "stock"+quotaSuffix(), realStepLevels, qcals)
	})
	judgeChecks(s, append(realStepChecks(tg, realStepLevels, "", goal), realStepChecks(tg, realStepLevels, quotaSuffix(), goal)...))
	return s, nil
}

// realStepChecks: cpuwork against the best peer after each step, on the
// p99 of the requests served after it and the work served within the
// objective after it; with the figures a user reads beside them.
func realStepChecks(tg realTarget, levels []float64, suf string, goal float64) []check {
	where := ""
	if suf != "" {
		where = fmt.Sprintf("%.1f-CPU cgroup, ", realserverQuota)
	}
	var cs []check
	for _, l := range levels {
		at := fmt.Sprintf("%s@%.0f%%", suf, l*100)
		alts, aa := realPeersAt(tg, suf, l)
		lvl := fmt.Sprintf("%sstep %.0f%% to %.0f%%", where, realStepFrom*100, l*100)
		cs = append(cs,
			check{label: lvl + ": p99 of served after the step", judged: "cpuwork" + at, against: alts, metric: "p99_after_step_s", aa: aa},
			check{label: lvl + ": goodput within the objective after the step, CPU-s of work per s", judged: "cpuwork" + at, against: alts, metric: "goodput_after_step_cpu_per_s", higher: true, aa: aa},
			check{label: lvl + ": time until served p99 is back under the objective", judged: "cpuwork" + at, metric: "recovery_s", limit: goal, unit: "s"},
			check{label: lvl + ": shed share's variation after recovery (CV over windows)", judged: "cpuwork" + at, metric: "shed_cv"},
			check{label: lvl + ": CPU spent on requests whose client had gone, share of the slots' CPU", judged: "cpuwork" + at, metric: "abandoned_cpu_share", unit: "%"},
			check{label: lvl + ": requests the client gave up on", judged: "cpuwork" + at, metric: "gave_up_share", unit: "%"})
	}
	return cs
}
