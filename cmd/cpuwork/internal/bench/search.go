package bench

import (
	"fmt"
	"slices"
	"strings"
)

// The capacity at the objective (docs/bench.md, "Load levels
// and capacity"): for each variant of a load scenario, the highest offered
// rate at which its p99 of all requests (a refused one counted as never
// answered) stays within the scenario's latency objective, found in every
// round by a stepped search whose steps alternate between the variants.

// searchSteps are the search's offered rates, as fractions of the round's
// calibrated capacity (the best alternative's, measureCapacity). The first
// is the 80 % load level's own run; a variant that met the objective there
// is offered the next step, and so on, until it misses or the steps end.
// 10-15 % steps: the capacity of a variant is interpolated between the
// last step it met and the first it missed.
var searchSteps = []float64{0.8, 0.9, 1.0, 1.1, 1.25, 1.4}

// meetsShare is the share of a run's requests answered within the
// objective at which it meets it: 99 % answered within it is its p99 of
// all requests within it.
const meetsShare = 0.99

// The per-repeat figures the search records on each variant's run at the
// first step (variant@80%).
const (
	// capacityMetric is the capacity at the objective, requests/s offered.
	capacityMetric = "capacity_objective_per_s"
	// capacityBoundKey: +1 when the variant met the objective at every
	// step (its capacity is at least the last step's rate: a lower
	// bound), -1 when it missed at the first (at most that rate: an upper
	// bound), absent when interpolated.
	capacityBoundKey = "capacity_objective_bound"
)

// searchStepsPerRound is what the progress counts for a round's search:
// about two steps beyond the 80 % level for each variant (the descent's
// count grows the total when it takes more).
const searchStepsPerRound = 2

// abba returns order for the block-th block of a round: as it is for even
// blocks and reversed for odd ones (A B C, C B A, A B C, ...), so that a
// drift of the machine along a round hits every variant alike over each
// two blocks.
func abba[T any](order []T, block int) []T {
	if block%2 == 0 {
		return order
	}
	out := slices.Clone(order)
	slices.Reverse(out)
	return out
}

// searching is a variant in the round's capacity search.
type searching struct {
	name  string  // the variant's base name ("cpuwork", "pool-aa")
	host  *Repeat // its run at the first step, which records the capacity
	rate  float64 // the rate sent at the last step it met
	share float64 // the share within the objective there
	trace []string
}

// record stores the variant's capacity c (requests/s) and its bound on
// its host repeat (whose capacity_per_s is the round's calibration).
func (st *searching) record(c float64, bound int) {
	if st.host.Extra == nil {
		st.host.Extra = map[string]float64{}
	}
	st.host.Extra[capacityMetric] = c
	if bound != 0 {
		st.host.Extra[capacityBoundKey] = float64(bound)
	}
}

// interpolate is the rate at which the share within the objective falls
// to meetsShare, linear between a step met (rate a, share sa) and the next
// one missed (b, sb).
func interpolate(a, sa, b, sb float64) float64 {
	if sa <= sb || b <= a {
		return a
	}
	return a + (b-a)*(sa-meetsShare)/(sa-sb)
}

// searchCapacity runs round's capacity search after its load levels:
// first maps each variant's base name to the index of its repeat at the
// first step (its 80 % run of this round), block is the ABBA position at
// which the search's first step continues the round's order, capacity is
// the round's calibrated capacity and once runs a variant at a rate. A
// run that fails or is invalid ends that variant's search with no
// capacity this round (the pair is left out of the comparison, with the
// reason in the scenario's notes).
func (r *Runner) searchCapacity(s *Scenario, order []string, first map[string]int, capacity float64, round, block int, once func(v *Variant, variant string, rate float64) error) {
	var in []*searching
	var done []*searching
	for _, name := range order {
		i, ok := first[name]
		if !ok {
			continue
		}
		host := &s.variant(atLevel(name, searchSteps[0])).Repeats[i]
		share, ok := host.Extra["within_objective_share"]
		if !ok {
			continue
		}
		rate := wholeRate(searchSteps[0] * capacity)
		st := &searching{name: name, host: host, rate: rate, share: share,
			trace: []string{fmt.Sprintf("%.0f/s %.1f%%", rate, 100*share)}}
		if share < meetsShare {
			st.record(rate, -1)
			done = append(done, st)
			continue
		}
		in = append(in, st)
	}
	for k := 1; k < len(searchSteps) && len(in) > 0; k++ {
		var next []*searching
		for _, st := range abba(in, block+k) {
			offer := wholeRate(searchSteps[k] * capacity)
			r.step(fmt.Sprintf("%s: capacity search, %s at %.0f%% (pair %d)", s.Name, st.name, 100*searchSteps[k], round+1))
			v := &Variant{Name: atLevel(st.name, searchSteps[k]), Valid: true}
			err := once(v, strings.TrimSuffix(st.name, aaSuffix), offer)
			if err == nil {
				finishLoadVariant(v)
				if !v.Valid {
					err = fmt.Errorf("%s", v.Invalid)
				}
			}
			if err == nil && len(v.Repeats) == 0 {
				err = fmt.Errorf("no run recorded")
			}
			if err != nil {
				st.trace = append(st.trace, fmt.Sprintf("%.0f/s not measured (%v): no capacity this round", offer, err))
				done = append(done, st)
				continue
			}
			// What the generator sent: in an overload the server's CPU is
			// the generator's too, and it may send up to 5 % short.
			sent := offer
			if v.AchievedPS > 0 {
				sent = min(offer, v.AchievedPS)
			}
			share := v.Repeats[0].Extra["within_objective_share"]
			st.trace = append(st.trace, fmt.Sprintf("%.0f/s %.1f%%", sent, 100*share))
			if share >= meetsShare {
				st.rate, st.share = max(st.rate, sent), share
				next = append(next, st)
				continue
			}
			st.record(interpolate(st.rate, st.share, sent, share), 0)
			done = append(done, st)
		}
		in = next
	}
	for _, st := range in {
		st.record(st.rate, +1)
		done = append(done, st)
	}
	var parts []string
	for _, st := range done {
		c, ok := st.host.Extra[capacityMetric]
		what := "not measured"
		switch {
		case !ok:
		case st.host.Extra[capacityBoundKey] > 0:
			what = fmt.Sprintf(">= %.0f/s (met at every step)", c)
		case st.host.Extra[capacityBoundKey] < 0:
			what = fmt.Sprintf("<= %.0f/s (missed at the first step)", c)
		default:
			what = fmt.Sprintf("%.0f/s = %.2fx", c, c/capacity)
		}
		parts = append(parts, fmt.Sprintf("%s %s [%s]", st.name, what, strings.Join(st.trace, ", ")))
	}
	slices.Sort(parts)
	s.Notes = append(s.Notes, fmt.Sprintf("capacity search, repeat %d (calibrated %.0f/s; rate sent: share answered within the objective): %s", round+1, capacity, strings.Join(parts, "; ")))
}

// atLevel names variant at load level l ("cpuwork@80%").
func atLevel(variant string, l float64) string { return fmt.Sprintf("%s@%.0f%%", variant, l*100) }

// capacityCheck compares the judged cpuwork variant's capacity at the
// objective with the alternatives' (control's A/A control for the
// margin), in the case named by where ("" or "1.5-CPU cgroup, ") whose
// variants carry the suffix suf. Its values are read from the first
// step's runs (variant@80%); a bound is said in the check's notes and
// keeps only the verdict it supports (boundedVerdict).
func capacityCheck(where, suf string, objective float64, alternatives []string, control string) check {
	host := func(name string) string { return atLevel(name+suf, searchSteps[0]) }
	var against, needs []string
	for _, a := range alternatives {
		against = append(against, host(a))
	}
	needs = append(append(needs, host("cpuwork")), against...)
	return check{
		label:   fmt.Sprintf(where+"capacity at the objective: the highest offered rate at which the p99 of all requests is within %s (stepped search)", ms(objective)),
		judged:  host("cpuwork"),
		against: against,
		metric:  capacityMetric,
		higher:  true,
		unit:    "/s",
		aa:      [2]string{host(control), host(control + aaSuffix)},
		needs:   needs,
		of: func(s *Scenario, name string, i int) (float64, string, error) {
			v := s.variant(name)
			if v == nil || i >= len(v.Repeats) {
				return 0, "", fmt.Errorf("%s repeat %d not measured", name, i+1)
			}
			x, ok := v.Repeats[i].Extra[capacityMetric]
			if !ok {
				return 0, "", fmt.Errorf("%s has no capacity in repeat %d (the search's notes say why)", name, i+1)
			}
			switch b := v.Repeats[i].Extra[capacityBoundKey]; {
			case b > 0:
				return x, name + " met the objective at every step: its capacity is a lower bound", nil
			case b < 0:
				return x, name + " missed the objective at the first step: its capacity is an upper bound", nil
			}
			return x, "", nil
		},
	}
}

// capacityDrift is the spread of the rounds' calibrated capacities, as a
// share of their median: how far the machine's speed moved over the
// scenario (0 for fewer than two rounds or a failed calibration).
func capacityDrift(cals []calibration) float64 {
	var c []float64
	for _, cal := range cals {
		if cal.failure != "" || cal.capacity <= 0 {
			return 0
		}
		c = append(c, cal.capacity)
	}
	if len(c) < 2 {
		return 0
	}
	return (slices.Max(c) - slices.Min(c)) / median(c)
}
