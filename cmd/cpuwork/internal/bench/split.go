package bench

import (
	"slices"
	"sync"

	"github.com/cpuwork/cpuwork"
	"github.com/cpuwork/cpuwork/account"
)

// split collects where the time went for the accounted tasks of one run
// of a cpuwork variant (cpuwork.Options.Account: a random sample plus
// every task that waited long for its slot, as the scenario sets it), and
// records for the run the mean of each part over the slowest 1 % of them:
// the split of the p99 tasks' latency that the report draws as a stacked
// bar. (The long waiters are over-represented among the accounted tasks,
// which is what the slowest 1 % are made of anyway.)
type split struct {
	mu    sync.Mutex
	accts []account.Task
	// exec is the run's executor: record also sets ended_late_share, the
	// share of its completed tasks that ended past their due in it
	// (ClassStats.EndedLate), beside the client's served_late_share.
	exec *cpuwork.Executor
}

// splitCap bounds the accounts kept per run.
const splitCap = 200_000

// account is the executor option that feeds s.
func (s *split) account() account.Options {
	return account.Options{Every: 1, OnTask: s.add}
}

func (s *split) add(a account.Task) {
	s.mu.Lock()
	if len(s.accts) < splitCap {
		s.accts = append(s.accts, a)
	}
	s.mu.Unlock()
}

// splitKey is the Extra key of a part's mean over the p99 tasks.
func splitKey(p account.Part) string { return "split_" + p.String() + "_s" }

// record sets, on v's latest repeat and as the median over its repeats,
// each part's mean (seconds) over the tasks at or above the p99 of the
// accounted tasks' latency (Wall, from their arrival at the executor), and
// how many accounts were partial among them.
func (s *split) record(v *Variant) {
	if s.exec != nil {
		var late, done uint64
		for _, c := range s.exec.Stats().Classes {
			late, done = late+c.EndedLate, done+c.Completed
		}
		v.setRepeatExtra("ended_late_share", float64(late)/float64(max(done, 1)))
		v.setExtra("ended_late_share", median(v.repeatExtras("ended_late_share")))
	}
	s.mu.Lock()
	accts := s.accts
	s.accts = nil
	s.mu.Unlock()
	if len(accts) == 0 {
		return
	}
	slices.SortFunc(accts, func(a, b account.Task) int { return int(b.Wall - a.Wall) })
	top := accts[:max(len(accts)/100, 1)]
	partial := 0
	var sums [account.NumParts]float64
	for _, a := range top {
		for p, d := range a.Parts {
			sums[p] += d.Seconds()
		}
		if a.Partial != "" {
			partial++
		}
	}
	for p := range account.Part(account.NumParts) {
		v.setRepeatExtra(splitKey(p), sums[p]/float64(len(top)))
		v.setExtra(splitKey(p), median(v.repeatExtras(splitKey(p))))
	}
	v.setRepeatExtra("split_tasks", float64(len(top)))
	v.setRepeatExtra("split_partial", float64(partial))
	v.setExtra("split_tasks", median(v.repeatExtras("split_tasks")))
}
