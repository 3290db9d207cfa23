package bench

// The tenants scenarios: a real server (imageproxy, OPA) serving ten
// tenants, one of which offers five times its fair share while the nine
// others offer 0.8 of theirs — 1.22x the server's capacity in all — behind
// one global semaphore, a semaphore per tenant inside it, failsafe-go's
// prioritized adaptive limiter with its usage tracker, and cpuwork's
// middleware with each request keyed by its tenant (cpuworkhttp
// Options.Key).

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cpuwork/cpuwork/cgroup"
)

const (
	tenantCount = 10
	tenantFlood = 5.0 // the flooding tenant's offered load, in fair shares (capacity / tenantCount)
	tenantFair  = 0.8 // each other tenant's
	// tenantsControl is the A/A control: the global semaphore.
	tenantsControl = "sem"
)

// tenantsLoad is the offered load in all, as a fraction of capacity.
var tenantsLoad = (tenantFlood + (tenantCount-1)*tenantFair) / tenantCount

// tenantsPeers are the admitters cpuwork is judged against here.
var tenantsPeers = []struct{ name, desc string }{
	{"sem", "one global semaphore for every tenant: an x/sync semaphore of GOMAXPROCS workers and a queue of 2x that, 503 when full"},
	{"tenant-sem", "the global semaphore and, before it, a semaphore per tenant of half of GOMAXPROCS (at least 1) with a queue of 2x that: no tenant holds more than half of the workers"},
	{"failsafe-prio", "failsafe-go v0.9.8 adaptivelimiter with its queue, BuildPrioritized with a usage tracker (10 s window), every request at priority Medium with its tenant as the user, calibrated every second"},
	{"sem-deadline", "a semaphore whose waiters leave at the objective (in overload only): an x/sync semaphore of GOMAXPROCS workers, a request with no worker by its arrival plus the objective answers 503"},
}

// tenantsTarget is tg's tenants scenario.
func tenantsTarget(tg realTarget) realTarget {
	tg.scenario += "-tenants"
	if tg.cmd == "imageproxy" {
		tg.scenario = "realserver-tenants"
	}
	tg.peers, tg.control = tenantsPeers, tenantsControl
	tg.cpuworkDesc = "the cpuworkhttp middleware with the objective and Options.Key (the request's tenant), served through WatchListener (8 added lines: realbench/admit)"
	tg.claim = fmt.Sprintf("%s serving %d tenants, one offering %.0fx its fair share beside %d offering %.1fx theirs (%.2fx capacity in all), with cpuwork's middleware keying each request by its tenant: more of the well-behaved tenants' requests answered within the objective than behind a global semaphore and no fewer than behind per-tenant semaphores, the server's goodput equivalent to the global semaphore's",
		strings.SplitN(tg.claim, " with ", 2)[0], tenantCount, tenantFlood, tenantCount-1, tenantFair, tenantsLoad)
	tg.desc = fmt.Sprintf("%s with %d tenants, one flooding at %.0fx its fair share (%.2fx capacity in all): a global semaphore, per-tenant semaphores, failsafe-go's prioritizer with usage tracking, cpuwork's middleware with Options.Key", strings.SplitN(tg.desc, " under ", 2)[0], tenantCount, tenantFlood, tenantsLoad)
	return tg
}

// tenantsDef is tg's tenants scenario, not in the default set.
func tenantsDef(tg realTarget) scenarioDef {
	tt := tenantsTarget(tg)
	return scenarioDef{name: tt.scenario, extra: true,
		desc:        fmt.Sprintf("%s (not in the default set: `cpuwork bench --scenario %s`)", tt.desc, tt.scenario),
		variants:    tt.names,
		steps:       func(r *Runner, vs []string) int { return loadSteps(r, vs, []float64{tenantsLoad}) + 1 },
		run:         func(r *Runner) (*Scenario, error) { return r.tenantsScenario(tt) },
		minDuration: 500 * time.Millisecond,
		budget:      360 * time.Second}
}

func (r *Runner) tenantsScenario(tg realTarget) (*Scenario, error) {
	s := &Scenario{Name: tg.scenario, Baseline: "sem", Claim: tg.claim}
	rig, undo, err := r.setUpReal(s, tg)
	defer undo()
	if rig == nil {
		return s, err
	}
	r.tenants.n, r.tenants.flood = tenantCount, tenantFlood/(tenantFlood+(tenantCount-1)*tenantFair)
	defer func() { r.tenants.n, r.tenants.flood = 0, 0 }()
	loads := []float64{tenantsLoad}
	var none *cgroup.Group
	once := r.realVariantOnce(s, rig, &none)
	variants := tg.variants()
	checks := func() []check { return tenantsChecks(tg, rig.slo.Seconds()) }
	estimate := float64(r.slots) / rig.perReq
	r.search = true
	defer func() { r.search = false }()
	cals := r.atLoads(s, variants, loads, tg.controlName(), checks,
		func(round int) calibration { return r.measureCapacity(s, "stock", round, estimate, once) }, once)
	s.Notes = append(s.Notes, fmt.Sprintf("%d tenants: t0 offers %.0fx its fair share (1/%d of capacity), t1-t%d %.1fx theirs, %.2fx capacity in all, requests of every tenant in %s's mix (small = %s, large = %s); objective %s; %s",
		tenantCount, tenantFlood, tenantCount, tenantCount-1, tenantFair, tenantsLoad, tg.cmd, tg.small, tg.large, ms(rig.slo.Seconds()), capacityNote("stock", r.slots, cals)))
	r.checkLoads(s, "stock", loads, cals)
	s.CapacityDrift = capacityDrift(cals)
	for _, v := range s.Variants {
		_, at, _ := strings.Cut(v.Name, "@")
		if b := s.variant("sem@" + at); b != nil && b.Latency.P99 > 0 {
			v.Ratio = ratiosTo(v, b)
		}
	}
	judgeChecks(s, tenantsChecks(tg, rig.slo.Seconds()))
	return s, nil
}

// tenantsChecks: cpuwork against each peer on the share of the
// well-behaved tenants' requests answered within the objective (their
// p99 of all requests is within the objective exactly when it is 99 % or
// more; the p99 itself is not compared: with more than 1 % refused it is
// past every answer, and p99OfAll's value then, the slowest answer, is a
// bound that favours the peer that refuses), and against the global
// semaphore on the server's goodput within the objective; with the
// figures a user reads beside them, the nine's p99 of all requests
// against the objective (slo, seconds) among them.
func tenantsChecks(tg realTarget, slo float64) []check {
	at := fmt.Sprintf("@%.0f%%", tenantsLoad*100)
	c := tg.controlName()
	aa := [2]string{c + at, c + aaSuffix + at}
	var cs []check
	for _, p := range []string{"sem", "tenant-sem", "failsafe-prio", "sem-deadline"} {
		if !slices.ContainsFunc(tg.peerList(), func(x struct{ name, desc string }) bool { return x.name == p }) {
			continue
		}
		cs = append(cs,
			check{label: fmt.Sprintf("%.0f%%: the %d well-behaved tenants' requests answered within the objective, against %s", tenantsLoad*100, tenantCount-1, p),
				judged: "cpuwork" + at, against: []string{p + at}, metric: "tenants_within_objective_share", higher: true, aa: aa})
	}
	return append(cs,
		check{label: fmt.Sprintf("%.0f%%: goodput within the objective, CPU-s of work per s, against the global semaphore", tenantsLoad*100),
			judged: "cpuwork" + at, against: []string{"sem" + at}, metric: "goodput_cpu_per_s", higher: true, aa: aa},
		check{label: fmt.Sprintf("%.0f%%: the well-behaved tenants' p99 of all requests (a refused one never answered)", tenantsLoad*100),
			judged: "cpuwork" + at, metric: "tenants_p99_all_s", limit: slo, unit: "s"},
		check{label: fmt.Sprintf("%.0f%%: the well-behaved tenants' requests unanswered (shed or failed)", tenantsLoad*100),
			judged: "cpuwork" + at, metric: "tenants_unanswered_share", limit: 0.01, unit: "%"},
		check{label: fmt.Sprintf("%.0f%%: the flooding tenant's requests served", tenantsLoad*100),
			judged: "cpuwork" + at, metric: "flood_served_share", unit: "%"})
}
