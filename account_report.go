package cpuwork

import (
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/cpuwork/cpuwork/account"
)

// slowest keeps the slowest accounts (by Wall) of the current window and
// of the last full one.
type slowest struct {
	mu         sync.Mutex
	window     int64 // ns
	start      int64 // now() when the current window began
	cur, last  []account.Task
	keep       int
	haveWindow bool
	// floor is the Wall of the slowest-kept list's last entry once the
	// current window holds slowestKeep, and floorUntil the window's end
	// (now() ns): an account no slower, before then, is not kept, and is
	// turned away without the lock.
	floor, floorUntil atomic.Int64
}

const slowestKeep = 8

// add keeps acc if it is among the current window's slowest, in order
// (slowest first): an insertion into at most slowestKeep accounts.
func (s *slowest) add(acc account.Task, t int64) {
	if int64(acc.Wall) <= s.floor.Load() && t < s.floorUntil.Load() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.roll(t)
	i := len(s.cur)
	for i > 0 && s.cur[i-1].Wall < acc.Wall {
		i--
	}
	if i >= slowestKeep {
		return
	}
	s.cur = slices.Insert(s.cur, i, acc)
	if len(s.cur) > slowestKeep {
		s.cur = s.cur[:slowestKeep]
	}
	if len(s.cur) == slowestKeep {
		s.floor.Store(int64(s.cur[slowestKeep-1].Wall))
		s.floorUntil.Store(s.start + s.window)
	}
}

func (s *slowest) roll(t int64) {
	if !s.haveWindow {
		s.start, s.haveWindow = t, true
	}
	if t-s.start >= s.window {
		if t-s.start >= 2*s.window {
			s.last = nil // nothing accounted in the last full window
		} else {
			s.last = s.cur
		}
		s.cur, s.start = nil, t
		s.floor.Store(0)
	}
}

func (s *slowest) get(t int64) []account.Task {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.roll(t)
	out := append(append([]account.Task(nil), s.cur...), s.last...)
	sort.Slice(out, func(i, j int) bool { return out[i].Wall > out[j].Wall })
	return out[:min(len(out), slowestKeep)]
}

// slowTasks is Stats.SlowTasks at now.
func (a *accountant) slowTasks(now int64) []account.Task { return a.slowest.get(now) }

// parts returns class c's part distributions (zero when none) and how
// many of its tasks were accounted.
func (a *accountant) parts(c Class) (out [account.NumParts]Histogram, n uint64) {
	hp := a.partHist[c].Load()
	if hp == nil {
		return out, 0
	}
	for p := range account.NumParts {
		out[p] = hp[p].snapshot()
	}
	return out, out[account.QueueWait].Count
}
