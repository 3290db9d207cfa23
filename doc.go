// Package cpuwork runs CPU-bound work inside Go services at the speed of
// the cores the service really has. Its Executor is an admission controller
// for CPU slots: at most Stats().Slots tasks hold a slot at once, one slot per
// core of the CPU budget, and the rest wait in bounded per-class queues.
//
// # Why admission, not more goroutines
//
// A Go program runs goroutines (G) on OS threads (M) holding one of
// GOMAXPROCS processors (P). Thousands of runnable CPU-bound goroutines are
// time-sliced every 10 ms (the runtime's preemption interval), so long tasks
// behave like processor sharing and all finish late; under a CFS quota,
// more parallelism than the quota gets the whole process throttled for the
// rest of each 100 ms period; tight loops that never block hold their P and
// delay timers and the netpoller; and the runtime has no priorities. An
// Executor bounds the work in flight to the budget (package budget: the
// cgroup quota of the leaf and its ancestors, and the affinity mask),
// serves queued tasks by class, and gives long tasks Checkpoint to hand
// their slot and their P back.
//
// # Model
//
//   - Slots. Options.Slots, or from the CPU budget: under a fractional
//     quota ceil(quota) slots of which the last is open only while the
//     cgroup stays under its quota (Options.Quota, QuotaFraction by
//     default), else budget.Budget.Slots (the whole cores of the budget,
//     at least 1, at most GOMAXPROCS); re-read every second so the slot
//     count follows a changed quota or GOMAXPROCS. GOMAXPROCS bounds the
//     slots only while the tasks run Go code: tasks measured to run in cgo
//     or system calls (which hold no P) get the slots the budget allows.
//     Under a fractional quota, slots that hold tasks not on a CPU
//     (reading a body, fetching a source) while work queues and the quota
//     idles get more slots beside them, up to twice ceil(quota), closed
//     again on throttling or once work no longer queues. The
//     executor never calls runtime.GOMAXPROCS: that would switch off the
//     runtime's own quota tracking.
//   - Classes. Critical is served strictly first. Interactive and Batch
//     share slots by weight (64:1 by default) on measured slot time: each
//     class's virtual time is its charged slot time divided by its weight,
//     and a freed slot goes to the class that is behind (weighted fair
//     queuing, the virtual-time form of deficit round robin; a class that
//     starts waiting gets no credit for its idle time). Background runs
//     on slots nobody else waits for, with a starvation guard: a queued
//     Background task is admitted after 64 grants to other classes or
//     once it has waited 1 s. A class says how much a
//     request matters, never how big it is: a large user request is
//     Interactive like a small one.
//   - Latency targets. Inside a class, the earliest due first: a task's
//     due is its arrival plus its latency target (WithTarget, its ctx
//     deadline, ClassOptions.LatencyTarget), its arrival when it has none, so
//     without targets a class is FIFO. A running task hands its slot over
//     at a Checkpoint to a waiter of its class that is due earlier, and
//     queues again at its own due: a large request split into parts keeps
//     its place in line. A task that can no longer meet its target is
//     refused (ErrDeadline, wrapped with ErrSaturated) at the door — while
//     its class sheds or its recent arrivals outrun the slots; otherwise
//     it queues and the head decides — or at the head of the queue
//     instead of being served late: always past a
//     ctx deadline; past an objective (WithTarget, ClassOptions.LatencyTarget)
//     once its class's late budget is spent, about 1 % of its queued
//     objective tasks being let through late (a p99 target's share), so
//     that below capacity a burst is answered late rather than refused.
//     Executor.Allow gives the door's verdict without submitting, for a
//     handler to refuse before it reads a large request body.
//   - Where tasks run. Do runs Critical and Interactive tasks on the
//     caller's goroutine once admitted: no hand-off, the caller's stack,
//     profiler labels and (for cgo) thread stay. Batch and Background tasks,
//     and every task started with Go or TryGo, run on executor-owned worker
//     goroutines. Options.Batch.Demote can put Batch and Background workers on
//     SCHED_IDLE threads (opt-in, under a starvation guard: a demoted
//     thread that holds a P loses to any CPU-bound process sharing its
//     cgroup).
//   - A slot belongs to the goroutine that runs the task. fn receives the
//     submitter's ctx unchanged; the executor finds a goroutine's task in
//     a table keyed by the goroutine's identity. Checkpoint acts on the
//     calling goroutine's task, and a Do or For of the same executor
//     called on that goroutine (or in a chunk of For) runs on the slot
//     already held, so nested use cannot deadlock. A goroutine that fn
//     starts holds no slot: a Do there waits for one of its own.
//   - Admission fast path. When a slot is free and no queued task could
//     take it, Do takes it with a compare-and-swap, no lock and no
//     allocation. Queued tasks are never overtaken by new arrivals.
//   - Checkpoint. Inside long loops: hands the slot to waiting work of a
//     more urgent class or due earlier, and yields the P to runnable
//     goroutines and due timers. A few nanoseconds when there is nothing
//     to do.
//   - For. A chunked parallel loop that runs on the caller's slot plus
//     helpers: on slots free now, and up to max(2, ceil(slots/2)) waiting in
//     line at the loop's due like any task of its class. The caller never
//     waits for a second slot, so nested use cannot deadlock.
//   - Load shedding, never loss. A full class queue, a ctx deadline the
//     estimated queue wait cannot meet, or a class queue standing above
//     ClassOptions.MaxQueueWait gives an error wrapping ErrSaturated at once; a
//     context that is done before admission, or ends while queued, gives
//     its error and the task never runs; Close stops admission with
//     ErrClosed, drains or fails the queue, and waits for running tasks. A
//     panic becomes a *PanicError, runtime.Goexit ErrGoexit. Every
//     submitted task either runs exactly once or its submitter gets an
//     error.
//   - Observability. Tasks run under the pprof label cpuwork.class=<class>
//     (added to the labels of their submission) and, while an
//     execution trace is recording, inside a runtime/trace region named
//     after the class. Stats reports per-class counters and
//     queue-wait and slot-time percentiles.
//
// The repository's docs describe the design, the evidence behind each
// choice and what each part costs.
package cpuwork
