// Package account names where a task's time went, for the sample of tasks
// a cpuwork executor accounts (cpuwork.Options.Account). Each account
// splits the latency from arrival to completion into parts that sum to it:
//
//   - QueueWait: arrival to its first slot, plus every wait for its slot
//     again after handing it over at a Checkpoint (the executor's clock);
//   - OnCPU: time its thread ran while the task ran on it (the kernel's
//     sum_exec_runtime, /proc/self/task/TID/schedstat field 1);
//   - KernelRunQueue: time its thread was runnable on a kernel run queue
//     but not running (schedstat's run_delay), throttling excluded;
//   - Throttled: time the cgroup that sets the CPU quota held the thread
//     back: between two readings of the thread at least 1 ms apart in run
//     delay or idle wall time, if the cgroup's nr_throttled grew
//     meanwhile, the run delay and the wall time the thread was neither
//     running nor runnable between them;
//   - GoRunQueue: after yielding its P at a Checkpoint until it ran again;
//   - GC: stop-the-world pauses during the run (runtime/metrics);
//   - Other: the rest, not attributed: blocking (channels, I/O, locks),
//     system calls that sleep, time in Go's run queue after a preemption.
//     It is reported as such, never spread over the others.
//
// The accounted task's goroutine is locked to its thread from its slot to
// its end (except while it waits at a Checkpoint), so the thread's
// schedstat is the task's own. An account is Partial, with the reason,
// when a source could not be read; that time is then Other.
package account

import "time"

// Part is one part of a task's latency; see the package doc for each
// part's source.
type Part uint8

const (
	QueueWait Part = iota
	OnCPU
	KernelRunQueue
	Throttled
	GoRunQueue
	GC
	Other

	// NumParts is the number of parts, for arrays indexed by Part.
	NumParts = 7
)

var partNames = [NumParts]string{"queue_wait", "on_cpu", "kernel_run_queue", "throttled", "go_run_queue", "gc", "other"}

// String returns the part's snake_case name ("queue_wait", ...), the
// value of the part label in cpuwork/prom.
func (p Part) String() string {
	if p < NumParts {
		return partNames[p]
	}
	return "part(?)"
}

// Options configures accounting (cpuwork.Options.Account). The zero value
// accounts one task in 1024, chosen at random.
type Options struct {
	// Every accounts one task in Every, chosen at random. 0 means one in
	// 1024, fewer of a class whose tasks are so short that this would cost
	// over 1 % of their slot time; a value set here is kept exactly.
	// Negative turns accounting off (SlowWait and OnTask then do nothing).
	Every int
	// SlowWait, when positive, also accounts every task whose wait for its
	// first slot was at least this long, up to SlowLimit per second.
	SlowWait time.Duration
	// SlowLimit bounds the tasks SlowWait accounts per second, so that an
	// overload, where every task waits, does not spend CPU on accounting.
	// 0 means 100; negative means no bound. Every's draw is not bounded.
	SlowLimit int
	// OnTask, when set, receives every account on the task's goroutine
	// after the task ended and released its slot (a log line, span
	// attributes). It must not block.
	OnTask func(Task)
}

// Task is where one task's time went: Wall, from its arrival to its end,
// is the sum of Parts.
type Task struct {
	Class string        // the task's class, as cpuwork.Class.String names it
	End   time.Time     // when the task ended
	Wall  time.Duration // arrival to end
	Run   time.Duration // first slot to end
	Parts [NumParts]time.Duration
	// Partial is empty when every stretch was read on one thread, else
	// why the thread-level parts are incomplete (that time is in Other).
	Partial string
}
