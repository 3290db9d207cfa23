package cpuwork

import (
	"slices"
	"sort"
	"sync"
	"sync/atomic"
)

// slowest keeps the slowest accounts (by Wall) of the current window and
// of the last full one.
type slowest struct {
	mu         sync.Mutex
	window     int64 // ns
	start      int64 // now() when the current window began
	cur, last  []TaskAccount
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
func (s *slowest) add(acc TaskAccount, t int64) {
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

func (s *slowest) get(t int64) []TaskAccount {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.roll(t)
	out := append(append([]TaskAccount(nil), s.cur...), s.last...)
	sort.Slice(out, func(i, j int) bool { return out[i].Wall > out[j].Wall })
	return out[:min(len(out), slowestKeep)]
}

// SlowTasks returns the slowest accounted tasks (by Wall, slowest
// first, at most 8) of the current 10 s window and the one before, for a
// debug endpoint (schedstat.Handler) or a log. Empty when accounting is
// off (Options.Account.Every < 0) or nothing was accounted yet.
func (e *Executor) SlowTasks() []TaskAccount {
	mustExec(e)
	if e.acct == nil {
		return nil
	}
	return e.acct.slowest.get(now())
}

// PartHistogram returns class c's distribution of part p over the
// accounted tasks (for a Prometheus collector); the zero Histogram when
// accounting is off, nothing of c was accounted, or c or p is invalid.
func (e *Executor) PartHistogram(c Class, p Part) Histogram {
	mustExec(e)
	if e.acct == nil || !c.valid() || p >= NumParts {
		return Histogram{}
	}
	hp := e.acct.parts[c].Load()
	if hp == nil {
		return Histogram{}
	}
	return e.hist(&hp[p])
}

// partSummaries returns class c's part summaries (zero when none).
func (e *Executor) partSummaries(c Class) (out [NumParts]Summary, n uint64) {
	if e.acct == nil {
		return out, 0
	}
	hp := e.acct.parts[c].Load()
	if hp == nil {
		return out, 0
	}
	for p := range Part(NumParts) {
		out[p] = hp[p].summary()
	}
	return out, out[PartQueueWait].Count
}

// Debug is what an executor shows at a debug endpoint: its statistics and
// its slowest accounted tasks. Serve it with schedstat.Handler:
//
//	mux.Handle("/debug/cpuwork", schedstat.Handler(s, func() any { return e.Debug() }))
//
// `cpuwork doctor --url` reads it.
type Debug struct {
	Stats     Stats         `json:"stats"`
	SlowTasks []TaskAccount `json:"slow_tasks"`
}

// Debug returns e's statistics and slowest accounted tasks (SlowTasks).
func (e *Executor) Debug() Debug { return Debug{Stats: e.Stats(), SlowTasks: e.SlowTasks()} }
