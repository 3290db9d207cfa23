package cpuwork

import (
	"log/slog"
	"time"

	"github.com/cpuwork/cpuwork/budget"
	"github.com/cpuwork/cpuwork/osthread"
)

// DefaultQueueLimit is the per-class queue bound used when
// Options.QueueLimit leaves a class at 0.
const DefaultQueueLimit = 1024

// MaxSlots is the largest slot count an executor accepts.
const MaxSlots = 4096

// QuotaPolicy is how an executor uses a CPU quota (Options.Quota).
type QuotaPolicy uint8

const (
	// QuotaFraction runs ceil(quota) slots, the last one of a fractional
	// quota open only while the cgroup stays under its quota.
	QuotaFraction QuotaPolicy = iota
	// QuotaFloor runs floor(quota) slots, unpaced.
	QuotaFloor
	// QuotaStrict is QuotaFraction that also paces a whole quota's last
	// slot when GOMAXPROCS is above the quota: never throttled, at a cost
	// in slot capacity.
	QuotaStrict
)

// DefaultCheckpointYield is Options.CheckpointYield's default: at most
// this long between the P yields of a task that calls Checkpoint.
const DefaultCheckpointYield = 40 * time.Microsecond

// Default weights of the classes that share slots by weight.
const (
	DefaultInteractiveWeight = 4
	DefaultBatchWeight       = 1
)

// Options configures an Executor. The zero value is valid: slots follow the
// detected CPU budget (under a fractional CPU quota, ceil(quota) slots of
// which the last is paced: QuotaFraction; else budget.Budget.Slots, the
// whole cores of the budget, at least 1, at most GOMAXPROCS), each class
// queues up to DefaultQueueLimit tasks, and Interactive and Batch share
// slots 4:1.
type Options struct {
	// Slots fixes the number of tasks that run at once. 0 means follow the
	// CPU budget, re-read every WatchInterval. Valid: 0..MaxSlots.
	Slots int

	// QueueLimit bounds each class's queue; a submission to a full queue
	// returns ErrSaturated at once. 0 means DefaultQueueLimit; negative
	// values are invalid.
	QueueLimit [NumClasses]int

	// MaxQueueWait is a queue-wait target per class. When the smallest
	// queue wait of the class's tasks granted a slot over an interval
	// (100 ms, or 2 slot times if longer) stays above it, the queue is
	// standing rather than absorbing a burst, and new tasks of the class
	// that would queue are refused at once with an error wrapping
	// ErrSaturated, until an interval's smallest wait is under the target
	// again (CoDel's test, applied at the door). Admitted tasks then keep
	// a bounded wait; the excess is shed in microseconds. Pick a target of
	// a few service times of the class (shed.go). 0 (the default): a
	// tenth of the latency target of the class's arrivals that carry one
	// (WithTarget, LatencyTarget, a ctx deadline), and only those are shed
	// by it; none for a class whose tasks carry no target. Independently
	// of it, a task whose ctx deadline is nearer than the estimated queue
	// wait is refused the same way.
	MaxQueueWait [NumClasses]time.Duration

	// LatencyTarget is a latency target per class, counted from a task's
	// submission; 0 (the default) is none. Inside a class, waiting tasks
	// are served earliest due first, a task's due being its arrival plus
	// the smallest of this, its WithTarget latency and its ctx deadline;
	// a task with none of them is due at its arrival, so a class without
	// targets is served FIFO. A task with a target is refused (an error
	// wrapping ErrSaturated and ErrDeadline) when it would queue and the
	// estimated queue wait plus its expected run time pass its due, or
	// when it reaches the head of the queue with less time left than its
	// expected run time; this target and WithTarget's are objectives, so
	// such a task is let through late instead while the class's late
	// budget lasts (about 1 % of its queued objective tasks; a ctx
	// deadline has none; ClassStats.AdmittedLate counts them). Negative
	// values make New fail. The rule, its sources and its cost: order.go
	// and docs/architecture.md.
	LatencyTarget [NumClasses]time.Duration

	// ForMaxSlots bounds the slots one For loop holds at once while other
	// tasks wait: its helpers beyond the bound give their slot back at
	// their next chunk boundary when anyone waits. Helpers within it wait
	// in line at the loop's due, like any task of its class, and hand
	// their slot over only to more urgent work or work due earlier. 0
	// means max(2, ceil(slots/2)) (at most the slots); valid 0..MaxSlots.
	// While nobody waits, a loop uses every free slot whatever the bound.
	ForMaxSlots int

	// InteractiveWeight and BatchWeight are the relative shares of
	// measured slot time that Interactive and Batch get while both wait
	// (weighted fair queuing on measured slot time, the virtual-time form
	// of deficit round robin). 0 means the default: DefaultInteractiveWeight
	// (4) and DefaultBatchWeight (1); a negative weight makes New fail.
	// Critical is always served first and Background last: they have no
	// weight.
	InteractiveWeight int
	BatchWeight       int

	// CheckpointYield is how often, on average, a task that calls
	// Checkpoint yields its P (runtime.Gosched) while every P is busy, so
	// that the P runs its due timers and the goroutines queued behind it:
	// timers run only when a P enters the scheduler (Go issue 38860), and
	// a due timer is not a runnable goroutine until then. Checkpoint reads
	// the clock every quarter to half of the interval (at most every
	// 100 µs) and yields at the first read 3/4 of the interval after the
	// last yield, so yields come 3/4 to 5/4 of it apart (a task that calls
	// Checkpoint at least that often). 0 means DefaultCheckpointYield
	// (40 µs); a negative value yields only when goroutines are runnable
	// (sampled every 100 µs). With a P idle it never yields on the timer:
	// the idle P runs the timers. The cost is one Gosched (~140 ns) per
	// interval: 0.35 % of a task at 40 µs. Measurements:
	// docs/performance.md.
	CheckpointYield time.Duration

	// WatchInterval is how often the budget is re-read when Slots is 0.
	// 0 means budget.DefaultWatchInterval (1s); negative means never: the
	// slot count stays what New detected.
	WatchInterval time.Duration

	// DisableProfileLabels turns off the cpuwork.class pprof label that
	// tasks otherwise run with (saves ~12 ns per task).
	DisableProfileLabels bool

	// Logger receives budget changes and watcher errors. nil logs nothing.
	Logger *slog.Logger

	// Demotion chooses whether Batch and Background workers run on OS
	// threads demoted to BatchSched, so that the kernel runs every other
	// thread first. The zero value, DemoteNever, does not demote: demoted
	// threads that hold a P lose to any CPU-bound process that shares the
	// cgroup (see Demotion). When demoting, a starvation guard undoes the
	// demotion for a cool-down once a demoted thread is starved while it
	// runs a task. Demotion needs no privileges; undoing it in place needs
	// CAP_SYS_NICE, and without it the worker's thread is replaced.
	Demotion Demotion

	// BatchSched is the scheduling of demoted worker threads; the zero
	// value means osthread.Demoted (SCHED_IDLE; nice 19 where refused).
	BatchSched osthread.Sched

	// SpareP keeps one P free of batch work: Batch and Background together
	// hold at most GOMAXPROCS-1 slots (at least 1), so goroutines outside
	// the executor and Critical/Interactive work always find a P, and with
	// demoted threads the kernel runs them first. Used as designed,
	// GOMAXPROCS and Slots are both the budget plus one: batch then keeps
	// every core of the budget and latency-sensitive work has its own P and
	// slot (maxprocs.Set(maxprocs.Options{Policy: maxprocs.BudgetPlusOne}) sets GOMAXPROCS so). With
	// GOMAXPROCS and Slots at the budget, it costs batch 1/GOMAXPROCS of its
	// throughput. The executor never changes GOMAXPROCS itself. Measured
	// effect: docs/architecture.md.
	SpareP bool

	// PaceQuota turns on quota pacing: when Slots is 0 and the budget comes
	// from a CFS quota, the executor runs ceil(quota) slots instead of
	// floor and paces Batch and Background admission to keep the process
	// under its quota (pacer.go); Critical and Interactive are never paced.
	// Off by default: in `cpuwork bench --scenario quota` (1.25 CPUs) it
	// avoided throttling but gave a worse round p99 than the floor policy
	// and used less of the quota (docs/architecture.md).
	PaceQuota bool

	// Quota chooses how Slots 0 uses a CFS quota. The zero value,
	// QuotaFraction, runs ceil(quota) slots for a quota that is not a
	// whole number of cores (1.25, 1.5, 2.5) and opens the last one only
	// while the cgroup's CPU usage stays under the quota (fraction.go):
	// the process uses the fractional core without being throttled; a
	// whole quota gets that many slots, unpaced. QuotaStrict paces a whole
	// quota q's last slot the same way when GOMAXPROCS is above q (Go's
	// default under a 1-CPU quota is 2 Ps), so that work outside the
	// executor (handlers, GC) beside busy slots does not get the process
	// throttled; the slots then get what the rest of the process leaves
	// of ~97 % of the quota, a cost in their latency near capacity
	// (docs/architecture.md, "Whole quotas"). QuotaFloor runs floor(quota)
	// slots (at least 1), as budget.Budget.Slots says, unpaced; the
	// fraction stays unused. Ignored with PaceQuota and with Slots set.
	Quota QuotaPolicy

	// Account records, for a sample of tasks, where their latency went:
	// queue wait, on-CPU time, kernel run queue, throttling, Go run
	// queue, GC and the unattributed rest (TaskAccount). The zero value
	// accounts one task in DefaultAccountEvery; Every < 0 turns it off.
	// Results: Stats (per class and part), PartHistogram, SlowTasks,
	// AccountOptions.OnTask. Sources, limits and cost: account.go.
	Account AccountOptions

	// CriticalLane, when set, runs Critical tasks admitted by Do on a
	// dedicated lane of locked OS threads with these options (for cgo
	// libraries that need a fixed thread, or an affinity and priority of
	// their own) instead of on the caller's goroutine.
	CriticalLane *osthread.Options

	// detect replaces budget.Detect in tests.
	detect func() (budget.Budget, error)
}
