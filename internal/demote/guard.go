// Package demote runs Batch and Background workers on demoted OS threads
// (SCHED_IDLE or a nice level) and guards them against starvation while
// they hold a P; under a quota it caps their CPU in a child cgroup.
package demote

import (
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	suspensionpkg "github.com/cpuwork/cpuwork/internal/suspension"
	"github.com/cpuwork/cpuwork/osthread"
)

// The starvation guard samples, every guardInterval, each demoted worker
// thread that runs a task: its CPU time (the thread's CPU-time clock,
// clock_gettime(2) with the clockid of another thread of this process,
// which the kernel reads through task_sched_runtime and so is current
// even while the thread waits) and its state (field 3 of
// /proc/self/task/TID/stat). A window in which the thread was runnable
// ('R') yet ran for less than half of it counts as starved; the time it
// did not run accumulates over consecutive starved windows. When that
// reaches guardStarved, the kernel is giving the thread's CPU to someone
// else while the thread holds a P. (The run delay of
// /proc/self/task/TID/schedstat would be the natural sensor, but the
// kernel adds to it only when the waiting thread finally runs: a starved
// thread's run delay stays flat until its starvation ends.) The guard then
// suspends demotion for a cool-down
// (guardCooldown, doubling on each repeat up to guardMaxCooldown). During
// a suspension a worker promotes its own thread back to the policy it
// started with at its next task; where the kernel refuses (leaving
// SCHED_IDLE or lowering nice needs CAP_SYS_NICE or RLIMIT_NICE), the
// worker exits, its thread is discarded with it, and a fresh, undemoted
// worker takes its place. With the privilege, the guard promotes a starved
// thread at once, in the middle of its task. After the cool-down workers
// demote again (always permitted). The suspension is process-wide.
//
// Under Batch.Beside batch work is meant to get only the CPU the budget's
// slots leave idle, on Ps of its own: a demoted thread starved while this
// process itself kept the CPUs busy is the design working and does not
// count towards guardStarved. Starved while other processes take about
// half of the CPUs this process may run on (othersMax: the CPUs less this
// process's CPU time, averaged over guardOthersTicks ticks, as a load
// generator's bursts come and go) is a neighbour's doing: it counts,
// since beside a neighbour that fills the CPUs a stop-the-world waits for
// the demoted thread. A neighbour whose runnable threads fill the CPUs
// takes at least half of them while it competes at equal weight with this
// process's own (at most its budget's CPUs); one that takes less, such as
// a load generator, leaves a CPU free when the process stops, and the
// demoted thread runs there.
const (
	guardInterval    = 5 * time.Millisecond
	guardStarved     = 4 * time.Millisecond
	guardCooldown    = 10 * time.Second
	guardMaxCooldown = 10 * time.Minute
	guardOthersTicks = 20  // ticks over which others' CPU is averaged (Beside)
	guardOthersMax   = 0.5 // CPUs others may take before starvation counts, at least (Beside)
)

// othersMax is the CPUs other processes may take, on average, before a
// demoted thread's starvation counts under Beside, for a process that may
// run on own CPUs: half of them less a quarter CPU (the average lags a
// neighbour that has just started), at least guardOthersMax.
func othersMax(own float64) float64 {
	return max(guardOthersMax, own/2-guardOthersMax/2)
}

// suspension is process-wide (internal/suspension).
var suspension = &suspensionpkg.Process

// epoch and now are the guards' clock, one for the process (the
// suspension's times are on it).
var epoch = time.Now()

func now() int64 { return int64(time.Since(epoch)) }

// Guard is the starvation guard of one executor's demoted pool: a
// demoted worker registers its thread, asks Adjust before each task
// (false: retire the thread) and unregisters as it exits.
type Guard struct {
	sched osthread.Sched // what demoted workers apply
	// ownCPUs is the CPUs this process may run on when starvation by its
	// own work is exempt (Beside), else 0. procCPU reads the process's
	// CPU time (0: unreadable).
	ownCPUs                float64
	procCPU                func() time.Duration
	lastProcCPU, lastProcW int64   // guard goroutine only: the previous sample
	others                 float64 // guard goroutine only: others' CPUs, averaged

	warn func(msg string, args ...any) // once per executor
	info func(msg string, args ...any)
	// group, when not nil, caps the demoted threads' CPU under a quota
	// (Group): Register moves each thread into it.
	group *Group

	suspensions atomic.Uint64
	promotions  atomic.Uint64
	retired     atomic.Uint64
	starvedNs   atomic.Int64

	mu      sync.Mutex
	workers map[*Worker]struct{}
	stop    chan struct{}
	done    chan struct{}
}

// SetBusy marks whether w runs a task: only a busy worker's starvation
// counts.
func (w *Worker) SetBusy(busy bool) { w.busy.Store(busy) }

// Worker is one demotable worker thread.
type Worker struct {
	tid     int
	orig    osthread.Sched // the thread's scheduling before demotion
	demoted atomic.Bool
	busy    atomic.Bool
	stat    *os.File // /proc/self/task/TID/stat, nil if unreadable
	clock   int32    // the thread's CPU-time clockid
	// Guard goroutine only: the previous sample and the current streak.
	lastCPU, lastWall int64
	sampled           bool
	starving          int64       // ns not running over consecutive starved windows
	promoteTried      atomic.Bool // an in-place promotion was tried since the last demotion
}

// Stats is what a guard did: whether demotion is in force now (not
// suspended), the suspensions, in-place promotions and retired threads,
// and the time demoted workers spent starved in its windows.
type Stats struct {
	Active                           bool
	Suspensions, Promotions, Retired uint64
	StarvedTime                      time.Duration
}

// Stats reads the guard's counters.
func (g *Guard) Stats() Stats {
	return Stats{Active: g.allowed(),
		Suspensions: g.suspensions.Load(), Promotions: g.promotions.Load(),
		Retired: g.retired.Load(), StarvedTime: time.Duration(g.starvedNs.Load())}
}

// New returns the guard of a pool whose workers apply sched; warn is
// called once per executor, info for each suspension.
func New(sched osthread.Sched, warn, info func(string, ...any)) *Guard {
	g := &Guard{sched: sched, warn: warn, info: info,
		workers: map[*Worker]struct{}{}, stop: make(chan struct{}), done: make(chan struct{})}
	return g
}

// Beside exempts starvation by the process's own work (Batch.Beside):
// ownCPUs is the CPUs the process may run on, procCPU its CPU time.
// Called before Start.
func (g *Guard) Beside(ownCPUs float64, procCPU func() time.Duration) {
	g.ownCPUs, g.procCPU = ownCPUs, procCPU
}

// SetGroup makes each registered thread join group, which caps the
// demoted threads' CPU under a quota. Called before Start.
func (g *Guard) SetGroup(group *Group) { g.group = group }

// Start starts the guard's watch of its workers.
func (g *Guard) Start() { go g.run() }

// allowed reports whether demotion is in force now.
func (g *Guard) allowed() bool {
	u := suspension.Until.Load()
	return u == 0 || now() >= u
}

// Register is called by a new worker on its locked thread.
func (g *Guard) Register(tid int) *Worker {
	w := &Worker{tid: tid, clock: threadClock(tid)}
	if s, err := osthread.Current(); err == nil {
		w.orig = osthread.Sched{Policy: s.Policy, Nice: s.Nice, RTPriority: s.RTPriority}
	} else {
		w.orig = osthread.Sched{Policy: osthread.Other}
	}
	if f, err := os.Open(fmt.Sprintf("/proc/self/task/%d/stat", tid)); err == nil {
		w.stat = f
	}
	if g.group != nil {
		if err := g.group.add(tid); err != nil {
			g.warn("cpuwork: a batch thread stays outside the batch cgroup: its CPU is not capped", "err", err)
		}
	}
	g.mu.Lock()
	g.workers[w] = struct{}{}
	g.mu.Unlock()
	return w
}

// Unregister is called by a worker as its thread exits.
func (g *Guard) Unregister(w *Worker) {
	if g.group != nil {
		g.group.remove(w.tid)
	}
	g.mu.Lock()
	delete(g.workers, w)
	g.mu.Unlock()
	if w.stat != nil {
		w.stat.Close()
	}
}

// Adjust brings the calling worker's thread to the scheduling the guard
// wants now, before it runs a task. It returns false when the thread must
// be retired: demotion is suspended and the kernel refuses to undo it.
func (g *Guard) Adjust(w *Worker) bool {
	want := g.allowed()
	switch {
	case want && !w.demoted.Load():
		if err := g.sched.ApplyCurrent(); err != nil {
			if err2 := osthread.Nice19.ApplyCurrent(); err2 != nil {
				g.warn("cpuwork: cannot demote batch worker threads; they run at normal priority", "err", err2)
				return true
			}
			g.warn("cpuwork: batch worker threads demoted to nice 19 instead", "policy", g.sched.Policy.String(), "err", err)
		}
		w.promoteTried.Store(false)
		w.demoted.Store(true)
	case !want && w.demoted.Load():
		if err := w.orig.ApplyCurrent(); err != nil {
			g.retired.Add(1)
			return false
		}
		w.demoted.Store(false)
	}
	return true
}

// Close stops the guard's watch.
func (g *Guard) Close() {
	close(g.stop)
	<-g.done
}

func (g *Guard) run() {
	defer close(g.done)
	t := time.NewTicker(guardInterval)
	defer t.Stop()
	buf := make([]byte, 512)
	var starved []*Worker
	for {
		select {
		case <-g.stop:
			return
		case <-t.C:
		}
		starved = starved[:0]
		ownBusy := g.ownWorkBusy()
		g.mu.Lock()
		for w := range g.workers {
			if w.stat == nil || !w.demoted.Load() || !w.busy.Load() {
				w.sampled = false
				continue
			}
			cpu, ok := threadCPU(w.clock)
			if !ok {
				continue
			}
			wall := now()
			runnable := threadRunnable(w.stat, buf)
			if w.sampled {
				ran, elapsed := cpu-w.lastCPU, wall-w.lastWall
				if runnable && 2*ran < elapsed {
					g.starvedNs.Add(elapsed - ran)
					if !ownBusy {
						w.starving += elapsed - ran
					} else {
						w.starving = 0
					}
				} else {
					w.starving = 0
				}
				if w.starving >= int64(guardStarved) {
					starved = append(starved, w)
					w.starving = 0
				}
			}
			w.lastCPU, w.lastWall, w.sampled = cpu, wall, true
		}
		g.mu.Unlock()
		if len(starved) > 0 {
			g.fire(starved)
		}
	}
}

// ownWorkBusy reports whether other processes took less than othersMax
// of the CPUs this process may run on (ownCPUs set),
// averaged over the last guardOthersTicks ticks' time: a demoted thread
// starved now was starved by the process's own work.
func (g *Guard) ownWorkBusy() bool {
	if g.ownCPUs <= 0 {
		return false
	}
	return g.weighOthers(int64(g.procCPU()), now())
}

// weighOthers is ownWorkBusy with the process's CPU time p and the time
// w, both ns. The average is weighted by time, not by calls: on a loaded
// machine the guard's ticks come late, and an average over calls kept a
// starvation by another process counted as the process's own for 300 ms
// of ticks 100 ms apart.
func (g *Guard) weighOthers(p, w int64) bool {
	if p == 0 {
		g.lastProcW = 0
		return false
	}
	if g.lastProcW != 0 && w > g.lastProcW {
		others := max(g.ownCPUs-float64(p-g.lastProcCPU)/float64(w-g.lastProcW), 0)
		weight := -math.Expm1(-float64(w-g.lastProcW) / float64(guardOthersTicks*guardInterval))
		g.others += (others - g.others) * weight
	}
	g.lastProcCPU, g.lastProcW = p, w
	return g.others < othersMax(g.ownCPUs)
}

// fire suspends demotion and promotes the starved threads in place where
// the kernel permits it.
//
// A suspension already in force is not renewed by the same starvation: a
// demoted thread that could not be promoted stays starved until its task
// ends, and counting it again would only stretch the cool-down.
func (g *Guard) fire(starved []*Worker) {
	for _, w := range starved {
		if !w.promoteTried.Load() {
			w.promoteTried.Store(true)
			if err := w.orig.ApplyThread(w.tid); err == nil {
				w.demoted.Store(false)
				g.promotions.Add(1)
			}
		}
	}
	suspension.Mu.Lock()
	defer suspension.Mu.Unlock()
	if !g.allowed() {
		return
	}
	t := now()
	if t-suspension.LastFire < int64(2*suspension.Cooldown) && suspension.LastFire != 0 {
		suspension.Cooldown = min(2*suspension.Cooldown, guardMaxCooldown)
	} else {
		suspension.Cooldown = guardCooldown
	}
	suspension.LastFire = t
	suspension.Until.Store(t + int64(suspension.Cooldown))
	g.suspensions.Add(1)
	g.info("cpuwork: demoted batch threads starved while holding a P; demotion suspended",
		"threads", len(starved), "cooldown", suspension.Cooldown)
}

// threadRunnable reports whether the thread whose /proc/self/task/TID/stat
// is f is running or runnable (state 'R', field 3 of proc(5)).
func threadRunnable(f *os.File, buf []byte) bool {
	n, err := f.ReadAt(buf, 0)
	if n == 0 && err != nil {
		return false
	}
	s := string(buf[:n])
	i := strings.LastIndexByte(s, ')') // the command may contain spaces and parentheses
	return i >= 0 && i+2 < len(s) && s[i+2] == 'R'
}
