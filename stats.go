package cpuwork

import (
	"sync/atomic"
	"time"

	"github.com/cpuwork/cpuwork/account"
	"github.com/cpuwork/cpuwork/internal/admission"
	"github.com/cpuwork/cpuwork/internal/netwatch"
	"github.com/cpuwork/cpuwork/pacing"
)

// classStats holds one class's counters and histograms. Every field is
// updated with atomics; nothing here takes the executor's lock.
type classStats struct {
	// Counters are the admission counts and estimators (the granter's).
	admission.Counters
	panicked  atomic.Uint64
	nested    atomic.Uint64 // ran inline on an enclosing task's slot
	yields    atomic.Uint64 // slots handed over at a Checkpoint
	endedLate atomic.Uint64 // queued with a target, finished past its due (do.go, finish)
	// timingMask is the fast path's timing stride less one (a power of
	// two less one, up to maxTimingStride-1), timedAt the now() of the
	// last timed start (do.go, timeFast).
	timingMask atomic.Uint64
	timedAt    atomic.Int64

	queueWait histogram
	slotTime  histogram
	_         [64]byte
}

// ClassStats is a snapshot of one class's counters and latency
// distributions. Counters are exact; the histograms record every queued
// task and, of the tasks admitted without queuing, one in 1 to 64 (as
// many as start about every 0.1-1 ms, each weighted by its stride), so
// their counts are estimates of the same totals.
type ClassStats struct {
	Class     Class
	Submitted uint64 // Admitted + Rejected + Canceled + Queued
	Admitted  uint64 // tasks that got a slot
	Completed uint64 // tasks that finished running, whatever their result
	Rejected  uint64 // submissions refused with ErrSaturated or ErrClosed
	Shed      uint64 // of Rejected: refused because a latency target could not be met or the class's queue stood above ClassOptions.MaxQueueWait
	// AdmittedLate counts tasks with a latency objective (WithTarget,
	// ClassOptions.LatencyTarget) that were let into the queue, or through its
	// head, though expected to miss it: the late budget of about 1 % of
	// the class's queued objective tasks. They are also in
	// Admitted once they get their slot.
	AdmittedLate uint64
	// EndedLate counts tasks with a latency target (WithTarget,
	// ClassOptions.LatencyTarget, a ctx deadline) that queued and finished
	// after their due, counted from the target's arrival: the executor's
	// own part of late answers. A client that sees more answers late also
	// counts the time outside the executor: before WithTarget (accepting
	// and reading a request, its handler waiting for a P) and after fn
	// returns. A task admitted at once, without queuing, is not judged.
	EndedLate uint64
	Canceled  uint64 // tasks whose context ended while queued
	Panicked  uint64 // tasks whose fn panicked (also counted in Completed)
	// Nested counts Do and For calls made with the context of a task of
	// this executor (they run on the slot that task holds), whether they
	// ran or their ctx had ended; they are never counted in Submitted,
	// Admitted, Canceled or Completed.
	Nested  uint64
	Yields  uint64 // slots handed to a higher class at a Checkpoint
	Queued  int    // waiting for a slot now
	Running int    // holding a slot now (Admitted - Completed)
	// QueueWait is the time from submission to getting a slot; SlotTime
	// the time a task held its slot (its service time, which includes any
	// time the OS or the Go scheduler did not run it).
	QueueWait Histogram
	SlotTime  Histogram
	// SlotSeconds is the total slot time charged to the class, in seconds
	// (what weighted sharing divides between Interactive and Batch).
	SlotSeconds float64
	// Accounted is how many of the class's tasks had where their time
	// went recorded (Options.Account); Parts is each part's distribution
	// over them, indexed by account.Part (zero when none).
	Accounted uint64
	Parts     [account.NumParts]Histogram
}

// Stats is a snapshot of an executor.
type Stats struct {
	Slots  int  // current slot count
	Free   int  // slots free now (negative while shrinking)
	Closed bool // Close has been called
	// Warning, when not empty, says why the slots cannot use the whole
	// CPU budget (GOMAXPROCS below it while the tasks run Go code) and
	// what to set; it is also logged once, to slog.Default without
	// Options.Logger.
	Warning  string
	Classes  [4]ClassStats // indexed by Class
	Demotion DemotionStats
	Pacing   PacingStats
	NetWatch NetWatchStats
	// SlowTasks are the slowest accounted tasks (by Wall, slowest first,
	// at most 8) of the current 10 s window and the one before; empty when
	// accounting is off or nothing was accounted yet.
	SlowTasks []account.Task
	// Keys are the tracked keys (WithKey) with the most slot time, then
	// refusals, most first, at most 10; UntrackedKeyTasks counts the
	// keyed tasks that queued untracked (every tracked key was busy).
	Keys              []KeyStats
	UntrackedKeyTasks uint64
	// Record is the request recorder's state (Options.Record).
	Record RecordStats
}

// KeyStats is one key's share of its class (WithKey).
type KeyStats struct {
	Key   string
	Class Class
	// SlotTime is the slot time of the key's tasks that queued (a task
	// that found a free slot is not charged to its key).
	SlotTime time.Duration
	// Refused counts the key's tasks refused (ErrSaturated).
	Refused uint64
	// Lead is how far past its share the key is now: its tasks queue
	// behind tasks of other keys that arrive up to Lead after them (at
	// most 10 s; 0: within its share).
	Lead time.Duration
}

// DemotionStats reports the demotion of Batch and Background worker
// threads (Options.Batch.Demote) and what its starvation guard did.
type DemotionStats struct {
	Enabled bool // Options.Batch.Demote is set and the platform can demote
	Active  bool // demotion is in force now: enabled and not suspended by the guard
	// Suspensions counts the times the guard saw a demoted worker, while
	// it ran a task, runnable but not running for 4 ms over consecutive
	// 5 ms windows in each of which it ran less than half the time, and
	// suspended demotion (for 10 s, doubling on repeats up to 10 min).
	// Under Batch.Beside, only while other processes take about half of
	// the CPUs this process may run on (at least half a CPU): batch gets
	// what this process's own work leaves.
	Suspensions uint64
	// Promotions counts starved threads promoted in place (needs
	// CAP_SYS_NICE); Retired counts worker threads replaced by fresh,
	// undemoted ones because the kernel refused to undo their demotion.
	Promotions, Retired uint64
	// StarvedTime is the time demoted workers spent runnable but not
	// running in the guard's starved windows while they ran tasks.
	StarvedTime time.Duration
}

// PacingStats reports the fractional slot's pacer (Options.Quota): under a
// CFS quota of q cores with a fraction (1.5), ceil(q) slots run of which
// the last is open only while the quota's cgroup uses less than Target x q.
// Its fields are pacing.Stats's; all zero when nothing is paced.
type PacingStats = pacing.Stats

// NetWatchStats counts what WatchListener and Checkpoint's network polls
// did in this process (every executor reports the same counts).
type NetWatchStats struct {
	// Watched is the listeners and connections registered; Unwatched
	// those that could not be (no file descriptor, or epoll_ctl failed:
	// they are served as without WatchListener).
	Watched, Unwatched uint64
	// Polls is the zero-timeout polls of the watched set; Wakes the polls
	// that found an arrival and parked a task so its P polled the network.
	Polls, Wakes uint64
}

// Stats returns a snapshot of the executor's counters, distributions and
// slowest accounted tasks, for an exporter or a debug endpoint. It reads
// every histogram bucket and allocates: do not call it per task.
func (e *Executor) Stats() Stats {
	mustExec(e)
	var st Stats
	snap := e.g.Snapshot(10)
	st.Slots, st.Free, st.Closed = snap.Slots, snap.Free, snap.Closed
	queued := snap.Queued
	if w := e.capWarning.Load(); w != nil {
		st.Warning = *w
	}
	st.NetWatch = NetWatchStats(netwatch.Read())
	if e.guard != nil {
		gs := e.guard.Stats()
		st.Demotion = DemotionStats{Enabled: true, Active: gs.Active, Suspensions: gs.Suspensions, Promotions: gs.Promotions,
			Retired: gs.Retired, StarvedTime: gs.StarvedTime}
	}
	if p := e.frac.Load(); p != nil {
		st.Pacing = p.Stats()
	}
	st.Record = e.rec.stats()
	if w := e.paceWarning.Load(); w != nil {
		st.Pacing.Warning = *w
	}
	for c := range Class(numClasses) {
		s := &e.stats[c]
		cs := ClassStats{
			Class:        c,
			Completed:    s.Completed.Load(),
			Admitted:     s.Admitted.Load(),
			Rejected:     s.Rejected.Load(),
			Shed:         s.Shed.Load(),
			AdmittedLate: s.Late.Load(),
			EndedLate:    s.endedLate.Load(),
			Canceled:     s.Canceled.Load(),
			Panicked:     s.panicked.Load(),
			Nested:       s.nested.Load(),
			Yields:       s.yields.Load(),
			Queued:       queued[c],
			QueueWait:    s.queueWait.snapshot(),
			SlotTime:     s.slotTime.snapshot(),
		}
		cs.Running = int(cs.Admitted - min(cs.Completed, cs.Admitted))
		cs.Submitted = cs.Admitted + cs.Rejected + cs.Canceled + uint64(cs.Queued)
		cs.SlotSeconds = time.Duration(s.Used.Load()).Seconds()
		if e.acct != nil {
			cs.Parts, cs.Accounted = e.acct.parts(c)
		}
		st.Classes[c] = cs
	}
	if e.acct != nil {
		st.SlowTasks = e.acct.slowTasks(now())
	}
	for _, k := range snap.Keys {
		st.Keys = append(st.Keys, KeyStats{Key: k.Name, Class: Class(k.Class), SlotTime: time.Duration(k.Slot),
			Refused: k.Refused, Lead: time.Duration(k.Lead)})
	}
	st.UntrackedKeyTasks = snap.UntrackedKeys
	return st
}
