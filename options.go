package cpuwork

import (
	"log/slog"
	"time"

	"github.com/cpuwork/cpuwork/account"
	"github.com/cpuwork/cpuwork/budget"
	"github.com/cpuwork/cpuwork/osthread"
)

// defaultQueueLimit is the per-class queue bound used when
// ClassOptions.QueueLimit is 0.
const defaultQueueLimit = 1024

// maxSlots is the largest slot count an executor accepts.
const maxSlots = 4096

// QuotaPolicy is how an executor uses a CPU quota (Options.Quota).
type QuotaPolicy uint8

const (
	// QuotaFraction runs ceil(q) slots when the quota q is not a whole
	// number of cores. While the tightest latency objective of the work
	// queued in the last two periods (WithTarget,
	// ClassOptions.LatencyTarget, a ctx deadline) is longer than the pause
	// a throttled period causes (Stats.Pacing.Pause: 25 ms for 1.5 CPUs on
	// 2 CPUs and a 100 ms period), every slot stays open and the kernel
	// may throttle: the quota is used whole, and a request the pause
	// catches can still meet its objective. Where the pause would miss the
	// objective, or no objective is known, the last slot is open only
	// while the cgroup's CPU usage stays under the quota, so the fraction
	// is used without throttling. A whole q gets q slots, unpaced.
	QuotaFraction QuotaPolicy = iota
	// QuotaFloor runs floor(quota) slots, unpaced.
	QuotaFloor
	// QuotaStrict is QuotaFraction that always paces, and also paces a
	// whole quota's last slot when GOMAXPROCS is above q, so that work
	// outside the executor never takes the process over its quota: never
	// throttled, at a cost in the slots' latency near capacity.
	QuotaStrict
)

// Options configures an Executor. The zero value is valid: slots follow the
// detected CPU budget (under a fractional CPU quota, ceil(quota) slots of
// which the last is paced unless the work's objective absorbs a throttle:
// QuotaFraction; else budget.Budget.Slots, the
// whole cores of the budget, at least 1, at most GOMAXPROCS while the tasks
// run Go code), each class
// queues up to 1024 tasks, Interactive and Batch share slots
// 64:1, and one task in 1024 is accounted.
type Options struct {
	// Slots fixes the number of tasks that run at once. 0 means follow the
	// CPU budget, re-read every WatchInterval. Valid: 0..4096.
	Slots int

	// Quota chooses how Slots 0 turns a CFS quota q into slots:
	// QuotaFraction (the zero value), QuotaFloor or QuotaStrict, each
	// described at its constant. Ignored when Slots is set.
	Quota QuotaPolicy

	// WatchInterval is how often the budget is re-read when Slots is 0.
	// 0 means budget.DefaultWatchInterval (1s); negative means never: the
	// slot count stays what New detected.
	WatchInterval time.Duration

	// Classes configures each class's queue, latency target, queue-wait
	// target and weight, indexed by Class. The zero value of each is the
	// default (ClassOptions).
	Classes [4]ClassOptions

	// Batch chooses how Batch and Background work is kept away from the
	// Ps and cores of latency-sensitive work beyond the slot order: a P
	// it never holds, threads the kernel runs last. The zero value uses
	// neither (BatchOptions).
	Batch BatchOptions

	// Account records, for a sample of tasks, where their latency went:
	// queue wait, on-CPU time, kernel run queue, throttling, Go run
	// queue, GC and the unattributed rest (package account). The zero
	// value accounts one task in 1024; Every < 0 turns it off. Results:
	// Stats (Parts per class, SlowTasks) and account.Options.OnTask.
	Account account.Options

	// CriticalLane, when set, runs Critical tasks admitted by Do on a
	// dedicated lane of locked OS threads with these options (for cgo
	// libraries that need a fixed thread, or an affinity and priority of
	// their own) instead of on the caller's goroutine.
	CriticalLane *osthread.Options

	// Record keeps a record of recent requests for `cpuwork simulate` to
	// replay (Executor.WriteTrace), and with Observe runs them at once
	// (RecordOptions). The zero value records nothing.
	Record RecordOptions

	// Logger receives the budget's changes (Info), the budget watcher's
	// errors and warnings about the options (Warn). nil drops all of
	// them except the two warnings a user must act on, which then go to
	// slog.Default: GOMAXPROCS capping the slots below the CPU budget,
	// and a fractional quota the pacer cannot hold (both also in
	// Stats).
	Logger *slog.Logger

	// Test hooks, zero outside the package's tests.
	detect          func() (budget.Budget, error) // replaces budget.Detect
	forMaxSlots     int                           // forMaxSlots's bound (0: the default rule)
	checkpointYield time.Duration                 // Checkpoint's yield interval (0: defaultCheckpointYield)
	noLabels        bool                          // run tasks without the cpuwork.class pprof label
	batchSched      osthread.Sched                // demoted threads' scheduling (zero: osthread.Demoted)
	processCPU      func() time.Duration          // the guard's reading of the process's CPU time (nil: processCPU)
}

// ClassOptions configures one class (Options.Classes). The zero value is
// the default: a queue of 1024 tasks, no latency target, a
// queue-wait target of two of the class's slot times for the arrivals
// that carry a latency target, and (Interactive and Batch) the default weight.
type ClassOptions struct {
	// QueueLimit bounds the class's queue; a submission to a full queue
	// returns ErrSaturated at once. 0 means 1024; negative
	// values make New fail.
	QueueLimit int

	// LatencyTarget is the class's latency target from a task's
	// submission; 0 (the default) is none. Waiting tasks of a class are
	// served earliest due first, a task's due being its arrival plus the
	// smallest of this, its WithTarget latency and its ctx deadline (its
	// arrival without any: FIFO). A task that would queue past its due
	// (judged on arrival while its class sheds or its recent arrivals
	// outrun the slots; otherwise it queues), or reaches the head with
	// less time left than its expected run time, is refused with an error
	// wrapping ErrSaturated and ErrDeadline, except
	// that about 1 % of a class's queued objective tasks are let through
	// late instead (ClassStats.AdmittedLate; a ctx deadline is never
	// overrun). Negative values make New fail.
	LatencyTarget time.Duration

	// MaxQueueWait is the class's queue-wait target. When the smallest
	// queue wait granted over an interval (100 ms, or 2 slot times) stays
	// above it while the arrivals bring more work than the slots can do
	// (or sooner: an arrival's estimated wait passes it while they bring
	// over 1.5 times that work), the class sheds: an arrival whose
	// estimated wait is above the target is refused with an error wrapping
	// ErrSaturated (in an overload of more than twice the slots, so is a
	// queued task that waited over twice it) until the arrivals calm for
	// 20 of them or a second. Pick a few service times of the class. 0
	// (the default): two of the class's measured slot times, within a
	// tenth and a half of the arrival's latency target, admitting up to
	// twice that, for arrivals that carry one. Negative values fail New.
	MaxQueueWait time.Duration

	// Weight is the class's relative share of measured slot time while
	// Interactive and Batch both wait (weighted fair queuing on measured
	// slot time, the virtual-time form of deficit round robin). 0 means
	// the default: 64 for Interactive, 1 for Batch (about Linux's
	// weights for nice 0 and nice 19): Batch keeps about 1/65 of the
	// slots while Interactive work waits; set 4 and 1, say, to give
	// Batch a fifth. Critical is always served first and Background
	// last: they take no weight, and a Weight set for them, or a
	// negative one, makes New fail.
	Weight int
}

// BatchOptions keeps Batch and Background work (Options.Batch) away from
// latency-sensitive work. Both are off by default; the default keeps it
// away with the slot order and Checkpoint alone.
type BatchOptions struct {
	// SpareP keeps one P free of batch work: Batch and Background together
	// hold at most GOMAXPROCS-1 slots (at least 1), so goroutines outside
	// the executor and Critical/Interactive work always find a P. Set
	// GOMAXPROCS and Slots to the budget plus one (maxprocs.Set with
	// maxprocs.BudgetPlusOne) so batch keeps every core of the budget;
	// with both at the budget it costs batch 1/GOMAXPROCS of its
	// throughput. The executor never changes GOMAXPROCS itself.
	SpareP bool

	// Demote runs Batch and Background work on OS threads demoted to
	// SCHED_IDLE (nice 19 where refused), under a starvation guard that
	// undoes the demotion for a cool-down once a demoted thread is starved
	// while it runs a task. It needs no privileges; undoing it in place
	// needs CAP_SYS_NICE, else the worker's thread is replaced. A demoted
	// thread holds a P, and beside another CPU-bound process in the same
	// cgroup the kernel starves it and everything queued on its P: set it
	// only in a process that owns its cgroup, and with SpareP.
	Demote bool

	// Beside runs Batch and Background on as many slots of their own, on
	// threads demoted as with Demote (implied): Critical and Interactive
	// keep every budget slot and batch gets the CPU they leave idle (its
	// starvation by this process's own work does not undo demotion). For
	// batch that cannot reach a Checkpoint (a library's loop, cgo). Set
	// GOMAXPROCS to twice the slots; only in a process that owns its
	// cgroup. Under a CPU quota batch runs in a child cgroup capped to what
	// the rest leaves (cgroup v1, with permission; else a warning says the
	// quota is not protected). Stats.Slots and the door count one side's.
	// Batch that allocates holds up GC cycles while its threads starve (a
	// cycle waits for every P) and requests that allocate wait for the
	// cycle: fewer cycles (GOGC, GOMEMLIMIT) make that rarer.
	Beside bool
}
