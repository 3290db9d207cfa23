package cpuwork

import (
	"log/slog"
	"time"

	"github.com/cpuwork/cpuwork/budget"
	"github.com/cpuwork/cpuwork/osthread"
)

// DefaultQueueLimit is the per-class queue bound used when
// ClassOptions.QueueLimit is 0.
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

// Options configures an Executor. The zero value is valid: slots follow the
// detected CPU budget (under a fractional CPU quota, ceil(quota) slots of
// which the last is paced: QuotaFraction; else budget.Budget.Slots, the
// whole cores of the budget, at least 1, at most GOMAXPROCS), each class
// queues up to DefaultQueueLimit tasks, Interactive and Batch share slots
// 4:1, and one task in 1024 is accounted.
type Options struct {
	// Slots fixes the number of tasks that run at once. 0 means follow the
	// CPU budget, re-read every WatchInterval. Valid: 0..MaxSlots.
	Slots int

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
	// fraction stays unused. Ignored when Slots is set.
	Quota QuotaPolicy

	// WatchInterval is how often the budget is re-read when Slots is 0.
	// 0 means budget.DefaultWatchInterval (1s); negative means never: the
	// slot count stays what New detected.
	WatchInterval time.Duration

	// Classes configures each class's queue, latency target, queue-wait
	// target and weight, indexed by Class. The zero value of each is the
	// default (ClassOptions).
	Classes [NumClasses]ClassOptions

	// Batch chooses how Batch and Background work is kept away from the
	// Ps and cores of latency-sensitive work beyond the slot order: a P
	// it never holds, threads the kernel runs last. The zero value uses
	// neither (BatchOptions).
	Batch BatchOptions

	// Account records, for a sample of tasks, where their latency went:
	// queue wait, on-CPU time, kernel run queue, throttling, Go run
	// queue, GC and the unattributed rest (TaskAccount). The zero value
	// accounts one task in 1024; Every < 0 turns it off. Results: Stats
	// (per class and part), PartHistogram, SlowTasks, AccountOptions.OnTask.
	// Sources, limits and cost: account.go.
	Account AccountOptions

	// CriticalLane, when set, runs Critical tasks admitted by Do on a
	// dedicated lane of locked OS threads with these options (for cgo
	// libraries that need a fixed thread, or an affinity and priority of
	// their own) instead of on the caller's goroutine.
	CriticalLane *osthread.Options

	// Logger receives budget changes and watcher errors. nil logs nothing.
	Logger *slog.Logger

	// Test hooks, zero outside the package's tests.
	detect          func() (budget.Budget, error) // replaces budget.Detect
	forMaxSlots     int                           // forMaxSlots's bound (0: the default rule)
	checkpointYield time.Duration                 // Checkpoint's yield interval (0: defaultCheckpointYield)
	noLabels        bool                          // run tasks without the cpuwork.class pprof label
	batchSched      osthread.Sched                // demoted threads' scheduling (zero: osthread.Demoted)
}

// ClassOptions configures one class (Options.Classes). The zero value is
// the default: a queue of DefaultQueueLimit tasks, no latency target, a
// queue-wait target of a tenth of the latency target of the arrivals that
// carry one, and (Interactive and Batch) the default weight.
type ClassOptions struct {
	// QueueLimit bounds the class's queue; a submission to a full queue
	// returns ErrSaturated at once. 0 means DefaultQueueLimit; negative
	// values make New fail.
	QueueLimit int

	// LatencyTarget is the class's latency target, counted from a task's
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
	LatencyTarget time.Duration

	// MaxQueueWait is the class's queue-wait target. When the smallest
	// queue wait of the class's tasks granted a slot over an interval
	// (100 ms, or 2 slot times if longer) stays above it while that
	// interval's arrivals bring more work (at their expected run times)
	// than the slots can do (or, for arrivals without a given run time,
	// outnumber the class's completions), the queue is standing and
	// growing rather than absorbing a burst or draining, and the class
	// sheds: a new task that would queue with a mean estimated queue wait
	// above the target is refused at once with an error wrapping
	// ErrSaturated, until intervals in which it refused none or whose
	// arrivals did not outrun the slots follow one another for 20
	// arrivals or a second (CoDel's test, applied at the door; one such
	// interval of a few arrivals happens by chance in overload). The
	// queue is then held near the target; the excess is shed in
	// microseconds. While the arrivals outrun the slots more than twice,
	// a queued task that has already waited more than twice the target
	// is also refused, the same way, when it reaches the head of the
	// queue, unless no other task of its class waits behind it: the
	// backlog let in before the queue was seen standing is not served
	// far above the target. Pick a target of a few service times of the
	// class (shed.go). 0 (the default): a tenth of the latency target of the
	// class's arrivals that carry one (WithTarget, LatencyTarget, a ctx
	// deadline), and only those are shed by it, while shedding those
	// whose mean estimated queue wait is above twice that target (the
	// queue's peak held at twice it, its trough near it); none for a
	// class whose tasks carry no target. Independently of it, a task whose ctx
	// deadline is nearer than the estimated queue wait is refused the same
	// way. Negative values make New fail.
	MaxQueueWait time.Duration

	// Weight is the class's relative share of measured slot time while
	// Interactive and Batch both wait (weighted fair queuing on measured
	// slot time, the virtual-time form of deficit round robin). 0 means
	// the default: 4 for Interactive, 1 for Batch. Critical is always
	// served first and Background last: they take no weight, and a
	// Weight set for them, or a negative one, makes New fail.
	Weight int
}

// BatchOptions keeps Batch and Background work (Options.Batch) away from
// latency-sensitive work. Both are off by default; the default keeps it
// away with the slot order and Checkpoint alone.
type BatchOptions struct {
	// SpareP keeps one P free of batch work: Batch and Background together
	// hold at most GOMAXPROCS-1 slots (at least 1), so goroutines outside
	// the executor and Critical/Interactive work always find a P, and with
	// Demote the kernel runs them first. Used as designed, GOMAXPROCS and
	// Slots are both the budget plus one: batch then keeps every core of
	// the budget and latency-sensitive work has its own P and slot
	// (maxprocs.Set(maxprocs.Options{Policy: maxprocs.BudgetPlusOne}) sets
	// GOMAXPROCS so). With GOMAXPROCS and Slots at the budget, it costs
	// batch 1/GOMAXPROCS of its throughput. The executor never changes
	// GOMAXPROCS itself. Measured effect: docs/architecture.md.
	SpareP bool

	// Demote runs Batch and Background work on OS threads demoted to
	// SCHED_IDLE (nice 19 where refused), so that the kernel runs every
	// other thread of the machine first, under a starvation guard that
	// undoes the demotion for a cool-down once a demoted thread is starved
	// while it runs a task (guard.go). Demotion needs no privileges;
	// undoing it in place needs CAP_SYS_NICE, and without it the worker's
	// thread is replaced.
	//
	// A demoted thread holds a Go P while it runs Go code: when another
	// CPU-bound process competes in the same cgroup, the kernel starves
	// the thread, and the goroutines queued on its P, its timers and every
	// stop-the-world wait for it. Measured beside one CPU-bound process in
	// the same cgroup, demoted batch made critical p99 worse than plain
	// goroutines, with or without SpareP, while the default (Checkpoint on
	// ordinary goroutines) kept its win (docs/architecture.md, "Demotion
	// and the starvation guard"). So demote only in a process that owns
	// its cgroup (a container whose only CPU-bound process is the
	// service), and with SpareP: without it the guard cannot run while
	// every P is held by a starved thread.
	Demote bool
}
