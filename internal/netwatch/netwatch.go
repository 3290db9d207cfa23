// Package netwatch serves requests that arrive while every P is busy:
// it watches listeners and their connections in a private epoll set and
// tells a Checkpoint when to park so that its P polls the network.
package netwatch

import (
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Network wake-ups: serving requests that arrive while every P is busy.
//
// Go's netpoller is asked for ready connections only when a P has nothing
// else to run (findRunnable in runtime/proc.go polls the network after the
// local and global run queues are empty) or by sysmon when nobody polled
// for 10 ms. While every P runs CPU-bound work, a request that arrives on
// a connection therefore waits up to 10 ms before its goroutine is even
// runnable — Gosched does not help, because the goroutine that yields is
// itself in the run queue the scheduler takes from first. The bench's
// priority scenario measured it: critical requests over loopback waited
// ~10 ms at p99 beside batch work, with Checkpoint or a Gosched every
// 50 µs alike, and ~5 ms with one P left idle (SpareP).
//
// WatchListener registers a listener and every connection it accepts in
// a private epoll set (level-triggered: a descriptor is reported while it
// has unread input, see sightings; the kernel drops a connection from it
// when the connection closes). Checkpoint,
// while every P is busy and no goroutine waits in the run queues, asks
// that set at most every netPollInterval whether anything arrived (one
// epoll_wait with a zero timeout, ~0.4 µs by
// BenchmarkNetworkPollNothingArrived, by one task of the process at a
// time). When something did, the task gives its slot up and parks its
// goroutine for ~30 µs on a timerfd that the runtime's own netpoller
// watches (parkOffSlot): its P, with empty run queues, polls the network
// at once and runs the goroutines of the connections that became ready;
// the request's handler finds the slot the task gave up and runs on it,
// and the timerfd's expiry wakes the task through the same netpoller,
// which then takes a slot again or queues for one at its due's place.
// (A task that held its slot through the park left the handler waiting
// for the park's end and a hand-over, its P idle meanwhile: measured in
// docs/architecture.md, "Checkpoint and the Go scheduler".)
// Cost: nothing without a watched listener; with one, one zero-timeout
// epoll_wait per netPollInterval per process, and per arrival that finds
// every P busy one park of the task (~60-220 µs with the kernel's 50 µs
// timer slack).

// netPollInterval is how often, at most, Checkpoint asks the watched
// connections whether a request arrived while every P is busy.
const netPollInterval = 200 * time.Microsecond

// netParkFor is how long a task parks so that its P polls the network.
// 100 µs let fewer arrivals go unread in a park (0-1 of 1,430 instead of
// 17-46) but cost batch work 6-9 points of its throughput alone and
// raised the critical p99 (docs/raw/netpark-2026-11-24.txt).
const netParkFor = 30 * time.Microsecond

// netStats are the process's counters (Read).
var netStats struct {
	watched, unwatched, polls, wakes atomic.Uint64
	last                             atomic.Int64 // Arrived's t of the last poll
}

// Counts are the process's watch counters: descriptors watched and not,
// polls made and polls that found an arrival.
type Counts struct{ Watched, Unwatched, Polls, Wakes uint64 }

// Read returns the counters.
func Read() Counts {
	return Counts{netStats.watched.Load(), netStats.unwatched.Load(), netStats.polls.Load(), netStats.wakes.Load()}
}

// Watch returns ln, wrapped so that ln and every connection it accepts
// are watched; ln itself when it cannot be watched (outside Linux, or
// without a descriptor).
func Watch(ln net.Listener) net.Listener {
	if !watchConn(ln) {
		return ln
	}
	return &watchedListener{ln}
}

type watchedListener struct{ net.Listener }

func (l *watchedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		watchConn(c)
	}
	return c, err
}

// Arrived is Checkpoint's network poll, at t (ns on the caller's
// monotonic clock, the same on every call), with every P busy
// and no goroutine runnable: it reports whether the watched set saw an
// arrival, and the caller then parks (Park) so its P polls the
// network. One caller per netPollInterval in the process polls.
func Arrived(t int64) bool {
	last := netStats.last.Load()
	if netEpoll.Load() < 0 || time.Duration(t-last) < netPollInterval || !netStats.last.CompareAndSwap(last, t) {
		return false
	}
	if !netPollMu.TryLock() { // the previous poll has not finished
		return false
	}
	defer netPollMu.Unlock()
	netStats.polls.Add(1)
	if !arrived() {
		return false
	}
	netStats.wakes.Add(1)
	return true
}

var netPollMu sync.Mutex

// maxSightings is how many polls in a row may park for the same
// descriptor with unread input.
const maxSightings = 2

// sightings decides which polls park. The watched set is level-triggered:
// a descriptor is reported while it has unread input. The first poll that
// sees it parks a task so its P polls the network and the descriptor's
// goroutine reads it; if the next poll sees it still unread, the runtime
// did not get it to its reader in that park and it parks once more. Measured
// with edge-triggered polls (one report per arrival): 17 and 46 of 1,430
// requests (1-3 %, the p99) were seen ~0.1-0.3 ms after they were sent, the
// task parked, and they still waited until the next request's arrival
// 7 ms later (docs/raw/netpark-2026-11-24.txt). A descriptor whose input
// stays unread longer (a handler that has not read its connection yet)
// parks no third time until a poll finds it drained.
type sightings struct {
	m map[int32]uint8 // descriptor -> polls in a row that saw it ready
}

// update records one poll's ready descriptors and reports whether to
// park: some descriptor was seen in fewer than maxSightings polls in a
// row. Descriptors not ready in this poll are forgotten.
func (s *sightings) update(ready []int32) bool {
	park := false
	for fd, n := range s.m {
		if !slices.Contains(ready, fd) {
			delete(s.m, fd)
		} else if n < maxSightings {
			s.m[fd] = n + 1
			park = true
		}
	}
	for _, fd := range ready {
		if _, ok := s.m[fd]; !ok {
			s.m[fd] = 1
			park = true
		}
	}
	return park
}
