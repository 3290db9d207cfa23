package cpuwork

import (
	"math/rand/v2"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cpuwork/cpuwork/account"
	"github.com/cpuwork/cpuwork/budget"
)

// Where a task's time went (issue 23). For a sample of tasks the executor
// splits the latency from arrival to completion into parts that sum to it:
//
//   - queue_wait: arrival to its first slot, plus every wait for its slot
//     again after handing it over at a Checkpoint (the executor's clock);
//   - on_cpu: time its thread ran while the task ran on it
//     (/proc/self/task/TID/schedstat field 1, the kernel's sum_exec_runtime);
//   - kernel_run_queue: time its thread was runnable on a kernel run queue
//     but not running (schedstat field 2, run_delay), throttling excluded;
//   - throttled: time the cgroup that sets the quota held the thread back:
//     between two readings of the task's thread at least 1 ms apart in
//     run delay or idle wall time, if the cgroup's cpu.stat nr_throttled
//     (counted when a throttle begins, kernel/sched/fair.c
//     throttle_cfs_rq) grew meanwhile, the run delay and the wall time the
//     thread was neither running nor runnable between them are throttled
//     (older kernels keep a throttled thread queued, so it shows as run
//     delay; Linux 6.18's task-based throttling dequeues it on its way
//     back to user space, so it shows as neither); run delay outside such
//     gaps is kernel_run_queue. throttled_time itself grows only when a
//     throttle ends, in lumps that may fall after the task. A task that
//     blocks during a throttle gets its blocked time counted throttled;
//   - go_run_queue: after yielding its P at a Checkpoint (runtime.Gosched)
//     until it ran again (the executor's clock around the Gosched);
//   - gc: stop-the-world pauses during the run (runtime/metrics
//     /sched/pauses/total/gc:seconds, summed from its buckets);
//   - other: the rest, not attributed: blocking (channels, I/O, locks),
//     system calls that sleep, and any overlap the parts above could not
//     see. It is reported as such, never spread over the others.
//
// The accounted task's goroutine is locked to its thread
// (runtime.LockOSThread) from its slot to its end, except while it waits
// after a Gosched or a hand-over at a Checkpoint (read before and after,
// that wait is Go run queue or queue wait), so the thread's schedstat is
// the task's own: no other goroutine runs on that thread.
// The thread is read at the slot, before and after every Gosched and
// hand-over at a Checkpoint, at every Checkpoint clock read (every
// 10-20 µs by default) and at the end. Time the thread was neither
// running nor runnable is other (the goroutine waited in Go's run queue
// after the runtime preempted it, or blocked), or throttled (above). An
// account is Partial, with the reason, when a source could not be read
// (or where the thread changed anyway: the time since the last reading
// is then other). Locking costs an accounted task a thread hand-off at
// each preemption by the runtime (not at its own Goscheds: it unlocks for
// them).
//
// Cost per accounted task: two or more reads of a per-thread schedstat
// file (pread on a cached descriptor), two of cpu.stat, two runtime/metrics
// reads (BenchmarkAccountedTask measures it). Tasks are accounted one in
// Options.Account.Every (1024 by default), chosen at random (at the
// default Every, fewer where tasks are so short that accountCost would be
// more than 1 % of their slot time: under ~1.3 µs), and every
// task that waited at least Options.Account.SlowWait for its slot, up to
// Options.Account.SlowLimit per second.

// defaultAccountEvery is Options.Account.Every's default: one task in 1024
// is accounted (fewer of tasks under ~1.3 µs: Options.Account.Every).
const defaultAccountEvery = 1024

// defaultAccountSlowLimit is Options.Account.SlowLimit's default: at most
// 100 slow tasks accounted per second: at most 100 x accountCost, 1.3 ms
// of CPU per second (0.13 % of one core).
const defaultAccountSlowLimit = 100

// accounting is the executor's one seam to task accounting: nil when
// Options.Account.Every < 0. The executor picks tasks (the sampler on the
// fast path, pickQueued for a task that queued), hands a picked task to
// begin at its slot and to end after its release, and reads the reports;
// a picked task's Checkpoints read it through its taskAccount.
type accounting interface {
	pickQueued(wait, avgSlot int64) bool
	begin(c Class, arrival, start int64) *taskAccount
	end(ta *taskAccount, c Class, end int64)
	slowTasks(now int64) []account.Task
	parts(c Class) (out [account.NumParts]Histogram, n uint64)
	reconfigure(b budget.Budget)
	close()
}

// accountSampler is the fast path's draw (pickAdmitted), held by the
// executor by value so that a task that takes a free slot crosses no seam
// unless it is picked. Zero when accounting is off.
type accountSampler struct {
	below    uint64 // 2^32 / every: a draw's top 32 bits below it pick the task (chosen)
	seed     uint64 // pickAdmitted's draw is mixed from it
	capShort bool   // Every is the default: short tasks are accounted less often (chosen)
	// slowWait: every task that waited this long (ns) for its slot is
	// accounted (up to SlowLimit a second); > 0 makes every queued task
	// timed (timeQueued).
	slowWait int64
}

// accountant holds an executor's accounting state.
type accountant struct {
	accountSampler
	slowLimit int64 // < 0: no bound
	onTask    func(account.Task)

	slowSec   atomic.Int64 // the second (now()/1e9) slowCount counts in
	slowCount atomic.Int64

	mu          sync.Mutex   // guards throttle's replacement (reconfigure)
	throttle    *cgroupClock // nil when no cgroup sets a quota
	throttleDir string
	cpus        float64 // CPUs throttling counts across

	partHist [numClasses]atomic.Pointer[[account.NumParts]histogram] // allocated at a class's first account
	slowest  slowest
}

// defaultSlowWindow is how long the slowest-tasks window lasts.
const defaultSlowWindow = 10 * time.Second

// newAccountant returns the accountant of o, or nil when o.Every < 0.
func newAccountant(o account.Options, b budget.Budget, haveBudget bool) *accountant {
	if o.Every < 0 {
		return nil
	}
	every := uint64(o.Every)
	a := &accountant{accountSampler: accountSampler{slowWait: int64(o.SlowWait)}, slowLimit: int64(o.SlowLimit), onTask: o.OnTask}
	if every == 0 {
		every, a.capShort = defaultAccountEvery, true
	}
	a.below, a.seed = (1<<32)/every, rand.Uint64()
	if a.slowLimit == 0 {
		a.slowLimit = defaultAccountSlowLimit
	}
	a.slowest.window = int64(defaultSlowWindow)
	if haveBudget {
		a.reconfigure(b)
	}
	return a
}

// reconfigure follows a budget change: the cgroup that sets the quota
// (its cpu.stat is reopened when it changed) and the CPUs.
func (a *accountant) reconfigure(b budget.Budget) {
	a.mu.Lock()
	defer a.mu.Unlock()
	dir := ""
	if l, ok := b.Limiting(); ok {
		dir = l.Dir
	}
	if dir == a.throttleDir && (dir == "") == (a.throttle == nil) {
		return
	}
	if a.throttle != nil {
		a.throttle.close()
		a.throttle = nil
	}
	a.throttleDir = dir
	if dir != "" {
		a.throttle = newCgroupClock(dir)
	}
}

// throttled reads nr_throttled of the cgroup that sets the quota; false
// when none is known or it cannot be read.
func (a *accountant) throttled() (uint64, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.throttle == nil {
		return 0, false
	}
	return a.throttle.read()
}

// close releases the accountant's descriptor.
func (a *accountant) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.throttle != nil {
		a.throttle.close()
		a.throttle = nil
	}
}

// taskAccount is the state of one task being accounted.
type taskAccount struct {
	arrival, start int64
	queueWait      int64
	goQueue        int64
	seg            threadStretch // the stretch running now: its first reading
	last           threadStretch // its latest reading on the same thread
	lastT          int64         // now() of last
	onCPU, delay   int64
	gap            gapKind // what the task waits for until its next reading
	pauseT         int64   // now() at accountPause
	moves          int     // stretches that ended on another thread
	lost           int64   // ns between a stretch's last reading and its move: in other
	partial        string
	acct           *accountant
	nrThrottled    uint64 // the cgroup's nr_throttled at the last reading
	haveThrottled  bool
	thrDelay       int64 // run delay attributed to throttling, ns
	thrIdle        int64 // not-runnable time attributed to throttling, ns
	gc0            float64
	pauses         []metrics.Sample // one: gcPausesName
}

// threadStretch is a reading of the thread a stretch began (or ended) on:
// its id, its on-CPU time and its run delay, ns.
type threadStretch struct {
	tid        int
	cpu, delay int64
	t          int64 // now() of the reading
	ok         bool
}

// pickQueued decides whether a task that waited wait ns for its slot is
// accounted.
func (a *accountant) pickQueued(wait, avgSlot int64) bool {
	return (a.slowWait > 0 && wait >= a.slowWait && a.slowToken()) || a.chosen(rand.Uint64(), avgSlot)
}

// pickAdmitted decides whether a task admitted on the fast path (no wait)
// as its class's n-th admission is accounted. Its draw is n mixed with the accountant's random seed
// (SplitMix64's finalizer: Steele, Lea & Flood, "Fast splittable
// pseudorandom number generators", OOPSLA 2014), a few nanoseconds
// cheaper on the fast path than a draw from the runtime's generator; a
// workload cannot line up with it without knowing the seed.
func (a *accountSampler) pickAdmitted(n uint64, avgSlot int64) bool {
	z := n ^ a.seed
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return a.chosen(z^z>>31, avgSlot)
}

// accountCost is the CPU one accounted task is taken to cost, ns: a
// bound above what BenchmarkAccountedTask minus BenchmarkAccountOff
// measures, and accountShare the most of a class's slot time the random one in Every
// may cost: for tasks shorter than accountCost/accountShare/Every (~1.3 µs
// at the defaults) fewer are accounted.
const (
	accountCost  = 13_000
	accountShare = 0.01
	// shareBelow is chosen's bound per ns of average slot time:
	// 2^32 * accountShare / accountCost, rounded (TestAccountShareBound).
	shareBelow = 3304
)

// chosen reports whether a uniform 64-bit draw picks its task, for a
// class whose average slot time is avgSlot ns (0: not measured yet): with
// probability 1/Every, or, at the default Every, avgSlot*accountShare/
// accountCost when that is lower; a comparison instead of a division.
func (a *accountSampler) chosen(draw uint64, avgSlot int64) bool {
	below := a.below
	if a.capShort && avgSlot > 0 {
		below = min(below, uint64(avgSlot)*shareBelow)
	}
	return draw>>32 < below
}

// slowToken takes one of the second's SlowLimit slow accounts. The
// window's reset races with takes in the same instant: a second can count
// a few more than the limit, never unboundedly many.
func (a *accountant) slowToken() bool {
	if a.slowLimit < 0 {
		return true
	}
	sec := now() / int64(time.Second)
	if w := a.slowSec.Load(); w != sec && a.slowSec.CompareAndSwap(w, sec) {
		a.slowCount.Store(0)
	}
	return a.slowCount.Add(1) <= a.slowLimit
}
