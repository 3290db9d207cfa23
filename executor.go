package cpuwork

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cpuwork/cpuwork/internal/admission"
	"github.com/cpuwork/cpuwork/internal/demote"
	"github.com/cpuwork/cpuwork/internal/goroutine"
	"github.com/cpuwork/cpuwork/internal/pacer"

	"github.com/cpuwork/cpuwork/budget"
	"github.com/cpuwork/cpuwork/osthread"
)

// Executor is an admission controller for CPU slots: at most Stats().Slots tasks
// hold a slot at once; the rest wait in bounded per-class queues. See the
// package documentation for the model. All methods are safe for concurrent
// use. An Executor must be created with New.
type Executor struct {
	// g owns the slots: every piece of admission and ordering state, and
	// the only methods that change it (internal/admission).
	g admission.Granter

	stats [numClasses]classStats
	// targeted[c]: class c has a latency target (ClassOptions.LatencyTarget).
	targeted [numClasses]bool

	// forMaxSlots is the For bound (Options.forMaxSlots in tests; 0: the default rule).
	forMaxSlots int
	// pools run asynchronous tasks: poolNormal for Critical and
	// Interactive, poolDemoted for Batch and Background (on demoted OS
	// threads when Options.Batch.Demote is set). resizeMu orders
	// resizes of the pools and the granter.
	pools    [2]*workerPool
	resizeMu sync.Mutex
	// Checkpoint's clock: yield the P every yieldGap ns on average (0:
	// never on a timer), at the first clock read yieldAfter ns after the
	// last yield; read the clock every checkMin..checkMax ns.
	yieldGap, yieldAfter, checkMin, checkMax int64
	warned                                   sync.Once
	demote                                   bool
	guard                                    starvationGuard // nil when Batch and Background are not demoted
	batchGroup                               *demote.Group   // Beside under a quota: batch threads' capped cgroup, or nil
	critLane                                 *osthread.Lane
	// frac opens and closes the extra slot of a fractional quota
	// (internal/pacer), made by New or, for a quota that appears later, by
	// the budget watcher (follow). fracStop and fracDone are set with it,
	// before it is stored, and read by Close after the watcher stopped.
	frac     atomic.Pointer[pacer.Pacer]
	quota    QuotaPolicy
	fracStop chan struct{}
	fracDone chan struct{}

	// rec keeps the recent requests (Options.Record); nil: none.
	rec *reqRecorder

	// acct records where sampled tasks' time went (account.go); nil when
	// Options.Account.Every < 0. sample is its fast-path draw (zero then).
	acct   accounting
	sample accountSampler

	// classLabels[c] is the profiler label set cpuwork.class=c
	// (goroutine.LabelSet): a task of class c runs with it when it has no
	// labels of its own.
	classLabels [numClasses]unsafe.Pointer
	noLabels    bool
	log         *slog.Logger
	logSet      bool // Options.Logger was set (else capacity warnings go to slog.Default)
	// capWarning is Stats.Warning: why the slots cannot use the whole
	// CPU budget (nil: they can).
	capWarning atomic.Pointer[string]
	// paceWarning is Stats.Pacing.Warning: why the fractional slot's
	// pacer cannot keep the cgroup under its quota (nil: it can).
	paceWarning atomic.Pointer[string]

	watchStop context.CancelFunc
	watchDone chan struct{}
	closeOnce sync.Once
	// drained is closed once the executor is closed and no task is queued
	// or running (checkDrained); shutDown once workers and lane stopped.
	drained   chan struct{}
	drainOnce sync.Once
	shutDown  chan struct{}
	laneErr   error
}

// New returns an executor configured by o, with its worker goroutines
// started. It returns an error for invalid options, or when o.Slots is 0 and
// the CPU budget cannot be read (the error wraps budget's; set Slots to run
// without it).
func New(o Options) (*Executor, error) {
	if o.Slots < 0 || o.Slots > maxSlots {
		return nil, fmt.Errorf("cpuwork: Options.Slots %d out of range 0..%d", o.Slots, maxSlots)
	}
	e := &Executor{
		noLabels: o.noLabels,
		log:      o.Logger,
		logSet:   o.Logger != nil,
	}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	cfg := admission.Config{DefaultQueueLimit: defaultQueueLimit, SpareP: o.Batch.SpareP, Beside: o.Batch.Beside, Owner: (*owner)(e), Log: e.log}
	for c := range e.stats {
		cfg.Classes[c] = admission.ClassConfig(o.Classes[c])
		e.targeted[c] = o.Classes[c].LatencyTarget > 0
		cfg.Counters[c] = &e.stats[c].Counters
	}
	if err := e.g.Init(cfg); err != nil {
		return nil, err
	}
	rec, err := newRecorder(o.Record)
	if err != nil {
		return nil, err
	}
	e.rec = rec
	e.setCheckpointYield(o.checkpointYield)
	for c := range Class(numClasses) {
		e.classLabels[c] = goroutine.LabelSet(labelKey, c.String())
	}
	if o.forMaxSlots < 0 || o.forMaxSlots > maxSlots {
		return nil, fmt.Errorf("cpuwork: forMaxSlots %d out of range 0..%d", o.forMaxSlots, maxSlots)
	}
	e.forMaxSlots = o.forMaxSlots
	batchSched := o.batchSched
	if batchSched.Policy == 0 && batchSched.Nice == 0 && batchSched.RTPriority == 0 && batchSched.CPUs == nil {
		batchSched = osthread.Demoted
	}
	e.demote = o.Batch.Demote || o.Batch.Beside
	if o.Quota > QuotaStrict {
		return nil, fmt.Errorf("cpuwork: Options.Quota %d is not a QuotaPolicy", o.Quota)
	}
	var sg *demote.Guard // e.guard, configured below
	if e.demote {
		if osthread.Supported {
			sg = demote.New(batchSched, e.warnOnce, e.log.Info)
			e.guard = sg
		} else {
			e.warnOnce("cpuwork: Options.Batch.Demote needs Linux thread scheduling; batch workers run undemoted", "goos", runtime.GOOS)
		}
	}
	e.pools[poolNormal] = newPool(e, "normal", nil)
	e.pools[poolDemoted] = newPool(e, "demoted", e.guard)
	slots := o.Slots
	detect := o.detect
	if detect == nil {
		detect = budget.Detect
	}
	var b budget.Budget
	var berr error
	var frac *pacer.Pacer
	if slots == 0 || o.Account.Every >= 0 {
		b, berr = detect()
	}
	if o.Account.Every >= 0 {
		// Accounting reads throttling from the cgroup that sets the
		// quota; without a readable budget it goes without (Slots set).
		a := newAccountant(o.Account, b, berr == nil)
		e.acct, e.sample = a, a.accountSampler
	}
	if slots == 0 {
		if berr != nil {
			e.closeAccounting()
			return nil, fmt.Errorf("cpuwork: detect CPU budget (set Options.Slots to run without it): %w", berr)
		}
		slots = b.Slots()
		e.quota = o.Quota
		if _, ok := b.Limiting(); ok {
			if p := e.newFrac(b); p != nil {
				frac = p
				slots = p.Slots()
			}
		}
	}
	// Nothing has started yet: an error above leaves nothing behind. The
	// lane is the first thing started, so its failure leaves nothing either.
	if o.CriticalLane != nil {
		lane, err := osthread.Start(*o.CriticalLane)
		if err != nil {
			e.closeAccounting()
			return nil, fmt.Errorf("cpuwork: start the critical lane: %w", err)
		}
		e.critLane = lane
	}
	if sg != nil && o.Batch.Beside {
		// Batch's CPU is what the budget's slots leave: starved by this
		// process's own work is the design (internal/demote). The CPUs
		// the process may use are a quota's, not the machine's.
		procCPU := processCPU
		if o.processCPU != nil {
			procCPU = o.processCPU
		}
		sg.Beside(ownCPUs(b, berr == nil), procCPU)
	}
	if _, quota := b.Limiting(); o.Batch.Beside && quota {
		// Before any worker starts: each registers its thread.
		e.besideUnderQuota(sg, b)
	}
	if e.guard != nil {
		e.guard.Start()
	}
	e.drained, e.shutDown = make(chan struct{}), make(chan struct{})
	e.setSlots(slots)
	if p := runtime.GOMAXPROCS(0); o.Batch.Beside && p < 2*slots {
		e.warnOnce("cpuwork: Options.Batch.Beside wants GOMAXPROCS at twice the slots: batch slots without a P of their own hold Ps the budget's slots need", "gomaxprocs", p, "slots", slots)
	}
	if frac != nil {
		e.startFrac(frac)
	}
	if o.Slots == 0 && o.WatchInterval >= 0 {
		ctx, cancel := context.WithCancel(context.Background())
		e.watchStop, e.watchDone = cancel, make(chan struct{})
		go e.follow(ctx, o.WatchInterval, detect, b)
	}
	return e, nil
}

// ownCPUs is the CPUs the process may run on: the machine's, or fewer
// under a budget (known) that allows fewer.
func ownCPUs(b budget.Budget, known bool) float64 {
	own := float64(runtime.NumCPU())
	if known && b.Cores > 0 {
		own = min(own, b.Cores)
	}
	return own
}

// besideUnderQuota caps Beside's batch threads (their guard g; nil:
// none) to what the rest of the process leaves of b's quota, in a child
// cgroup (internal/demote), or says why it cannot.
func (e *Executor) besideUnderQuota(g *demote.Guard, b budget.Budget) {
	if g == nil {
		return
	}
	l, _ := b.Limiting()
	bg, err := demote.NewGroup(l.Dir, b.Cores, processCPU)
	if err != nil {
		e.warnOnce("cpuwork: Options.Batch.Beside under a CPU quota: batch's CPU cannot be capped to what the requests leave, so demoted batch work spends the quota they need and the cgroup is throttled", "cores", b.Cores, "err", err)
		return
	}
	g.SetGroup(bg)
	e.batchGroup = bg
	e.log.Info("cpuwork: batch threads run in a child cgroup whose quota is what the rest of the process leaves of the budget", "cores", b.Cores, "cgroup", bg.Path())
}

// labelKey is the pprof label key under which tasks run; its value is the
// class name. A task runs with it added to the profiler labels of its
// submission (profiles split with `go tool pprof -tagfocus
// cpuwork.class=batch`), and its goroutine's labels are put back when it
// ends, through the runtime's hooks (internal/goroutine says why).
const labelKey = "cpuwork.class"

func (e *Executor) warnOnce(msg string, args ...any) {
	e.warned.Do(func() { e.log.Warn(msg, args...) })
}

// follow re-reads the budget and resizes the slot count when it changes;
// while GOMAXPROCS caps the slots below the budget (b0 is the budget New
// read) it also measures whether the tasks run outside Ps (outside.go)
// and lifts the cap when they do.
func (e *Executor) follow(ctx context.Context, interval time.Duration, detect func() (budget.Budget, error), b0 budget.Budget) {
	defer close(e.watchDone)
	changes := budget.WatchFunc(ctx, interval, detect)
	cur := b0
	var out outsidePs
	var ticker *time.Ticker
	var tick <-chan time.Time
	sampling := func() {
		want := capped(cur)
		switch {
		case want && ticker == nil:
			ticker = time.NewTicker(outsideTick)
			tick = ticker.C
		case !want && ticker != nil:
			ticker.Stop()
			ticker, tick = nil, nil
			out = outsidePs{}
		}
	}
	defer func() {
		if ticker != nil {
			ticker.Stop()
		}
	}()
	sampling()
	for {
		select {
		case c, ok := <-changes:
			if !ok {
				return
			}
			if c.Err != nil {
				e.log.Warn("cpuwork: re-read CPU budget", "err", c.Err)
				continue
			}
			cur = c.Budget
			if e.acct != nil {
				e.acct.reconfigure(cur)
			}
			if e.batchGroup != nil {
				e.batchGroup.SetQuota(cur.Cores)
			}
			sampling()
			e.applyBudget(out.effective(cur), "cpuwork: CPU budget changed")
		case <-tick:
			held, _ := e.g.Pacer().Occupied()
			if out.step(held) {
				msg := "cpuwork: the tasks run outside Go's Ps (cgo or system calls): slots follow the CPU budget, not GOMAXPROCS"
				if !out.on {
					msg = "cpuwork: the tasks run Go code again: slots are capped at GOMAXPROCS"
				}
				e.applyBudget(out.effective(cur), msg)
			}
			if out.decided && !out.on {
				e.capacityWarning(cur)
			}
		}
	}
}

// applyBudget sets the slot count and the fractional pacer from b, and
// logs msg when the slot count changes.
func (e *Executor) applyBudget(b budget.Budget, msg string) {
	n := b.Slots()
	if p := e.frac.Load(); p != nil {
		p.Reconfigure(b)
		e.g.Pacer().SetPacedCapacity(p.Capacity())
		if _, frac, _ := p.Quota(); frac > 0 {
			n = p.Slots()
		}
	} else if p := e.newFrac(b); p != nil {
		// A quota that appeared after New gets its fractional slot as
		// one present then does.
		e.startFrac(p)
		n = p.Slots()
	}
	if n != e.slotsNow() {
		e.log.Info(msg, "cores", b.Cores, "source", string(b.Source), "gomaxprocs", runtime.GOMAXPROCS(0), "slots", n)
		e.SetSlots(n)
	}
}

// capacityWarning records, and logs once (to slog.Default without a
// Logger), that GOMAXPROCS caps the slots below b's CPU budget while the
// tasks run Go code: the rest of the budget goes unused by them. Called
// by the budget watcher only.
func (e *Executor) capacityWarning(b budget.Budget) {
	if e.capWarning.Load() != nil {
		return
	}
	w := fmt.Sprintf("GOMAXPROCS %d caps the slots below the %.4g-core CPU budget (%s): Go code cannot use the rest; leave GOMAXPROCS to the Go runtime or set it to %d",
		b.GOMAXPROCS, b.Cores, b.Source, int(math.Ceil(b.Cores-0.01)))
	// Logged before Stats shows it: whoever reads it there finds it in
	// the log too. The budget watcher is the only caller.
	e.logger().Warn("cpuwork: "+w, "gomaxprocs", b.GOMAXPROCS, "budget_cores", b.Cores)
	e.capWarning.Store(&w)
}

// newFrac returns the fractional pacer of b under e's quota policy, or nil
// (no fractional quota, a policy without one, or no P for the extra slot:
// the budget watcher then says so once the tasks are seen to run Go code,
// capacityWarning).
func (e *Executor) newFrac(b budget.Budget) *pacer.Pacer {
	if e.quota != QuotaFraction && e.quota != QuotaStrict {
		return nil
	}
	return pacer.New(b, pacer.Config{Strict: e.quota == QuotaStrict, Host: (*pacerHost)(e), Clock: now,
		RunDelay: processRunDelay, BusySlots: true})
}

// pacerHost is the executor as the pacer's Host: the core's pacer seam
// (admission.Pacer), and the slot count and the warning, which are the
// executor's.
type pacerHost Executor

// SetExtraOpen: closing takes the extra slot out of the free count (it
// may go negative: the task over the count hands its slot back at its
// next Checkpoint); opening gives it back and admits the next waiter.
func (h *pacerHost) SetExtraOpen(open bool)              { h.g.Pacer().SetExtraOpen(open) }
func (h *pacerHost) OverCommitted() bool                 { return h.g.Pacer().OverCommitted() }
func (h *pacerHost) Occupied() (held int64, queued bool) { return h.g.Pacer().Occupied() }
func (h *pacerHost) SetPacedCapacity(c float64)          { h.g.Pacer().SetPacedCapacity(c) }
func (h *pacerHost) Shedding() bool                      { return h.g.Pacer().Shedding() }
func (h *pacerHost) SetBudgetSpent(spent bool)           { h.g.Pacer().SetBudgetSpent(spent) }
func (h *pacerHost) SetQuota(cores float64)              { h.g.Pacer().SetQuota(cores) }
func (h *pacerHost) Objective(turn bool) time.Duration   { return h.g.Pacer().Objective(turn) }
func (h *pacerHost) SetSlots(n int)                      { (*Executor)(h).SetSlots(n) }
func (h *pacerHost) Unpaceable(held, periods int)        { (*Executor)(h).pacingWarning(held, periods) }

// pacingWarning records, and logs once (to slog.Default without a
// Logger), that the fractional slot's pacer could not keep the cgroup
// under its quota: held of the last periods periods were throttled by
// tasks it could not stop. Called by the pacer, once.
func (e *Executor) pacingWarning(held, periods int) {
	w := fmt.Sprintf("the cgroup was throttled in %d of %d CFS periods by tasks that cannot give the paced slot back (cgo or system calls, or work that fans out over threads): the fractional quota cannot be paced; give the cgroup a whole number of cores, or set Quota: QuotaFloor to run floor(quota) slots",
		held, periods)
	e.logger().Warn("cpuwork: "+w, "held_periods", held, "periods", periods)
	e.paceWarning.Store(&w)
}

// logger is where warnings the user must see go: Options.Logger, or
// slog.Default without one.
func (e *Executor) logger() *slog.Logger {
	if !e.logSet {
		return slog.Default()
	}
	return e.log
}

// startFrac starts p's ticker and makes it the executor's pacer. Called by
// New before the executor is shared, or by the budget watcher, which Close
// stops before it reads fracStop.
func (e *Executor) startFrac(p *pacer.Pacer) {
	e.fracStop, e.fracDone = make(chan struct{}), make(chan struct{})
	stop, done := e.fracStop, e.fracDone
	go func() { defer close(done); p.Run(stop) }()
	e.g.Pacer().SetPacedCapacity(p.Capacity())
	e.frac.Store(p)
}

// Slots returns the number of slots now: at most this many tasks hold a
// slot at once (Options.Slots, or the CPU budget's as it changes, or the
// last SetSlots). It reads one atomic value; Stats().Slots is the same
// number in a full snapshot.
func (e *Executor) Slots() int {
	mustExec(e)
	return int(e.g.Slots())
}

// slotCount is Slots as the int64 the For loop's bounds compute in.
func (e *Executor) slotCount() int64 { return e.g.Slots() }

// slotsNow is the current number of slots (Stats.Slots, without the
// snapshot).
func (e *Executor) slotsNow() int { return int(e.g.Slots()) }

// SetSlots changes the number of slots to n (1..maxSlots). Growing admits
// queued tasks at once; shrinking lets running tasks finish and admits no
// new ones until fewer than n run. No task is lost or run twice. An executor
// created with Options.Slots 0 also calls this when the budget changes, so
// a manual value lasts until the next budget change.
func (e *Executor) SetSlots(n int) error {
	mustExec(e)
	if n < 1 || n > maxSlots {
		return fmt.Errorf("cpuwork: SetSlots(%d): out of range 1..%d", n, maxSlots)
	}
	e.setSlots(n)
	return nil
}

// setSlots sizes the worker pools and the granter to n slots, one resize
// at a time (resizeMu), so that concurrent calls leave both at the same n.
func (e *Executor) setSlots(n int) {
	e.resizeMu.Lock()
	defer e.resizeMu.Unlock()
	for _, p := range e.pools {
		p.resize(n)
	}
	e.g.SetCapacity(n)
}
