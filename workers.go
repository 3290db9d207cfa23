package cpuwork

import (
	"sync"

	"github.com/cpuwork/cpuwork/internal/demote"
	"github.com/cpuwork/cpuwork/osthread"
)

// workerPool runs asynchronous tasks: one worker per slot, plus spares lent
// while a task of the pool waits at a Checkpoint without a slot. All
// fields but runq are guarded by mu.
type workerPool struct {
	name    string
	runq    chan *Task // granted tasks plus stop sentinels (nil) never exceed its capacity
	mu      sync.Mutex
	workers int
	spares  int
	stopped bool // stop ran: no worker starts again
	// guard, when set, runs each worker on its own locked OS thread,
	// demoted while the starvation guard allows it.
	guard   starvationGuard // nil: the pool's threads are not demoted
	wg      sync.WaitGroup
	runTask func(*Task) (next *Task)
}

const (
	poolNormal  = 0 // Critical and Interactive tasks started with Go/TryGo
	poolDemoted = 1 // Batch and Background tasks
)

func (c Class) pool() int {
	if c.runsOnWorker() {
		return poolDemoted
	}
	return poolNormal
}

// starvationGuard is the pool's one seam to the starvation guard of its
// demoted workers (internal/demote): nil when Batch and Background are
// not demoted. A demoted worker registers its thread, asks Adjust before
// each task (false: retire the thread) and unregisters as it exits.
type starvationGuard interface {
	Start()
	Register(tid int) *demote.Worker
	Unregister(w *demote.Worker)
	Adjust(w *demote.Worker) bool
	Stats() demote.Stats
	Close()
}

func newPool(e *Executor, name string, g starvationGuard) *workerPool {
	return &workerPool{name: name, runq: make(chan *Task, 2*maxSlots+64), guard: g, runTask: e.runTask}
}

// resize starts or stops workers so that n run (spares aside).
func (p *workerPool) resize(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return
	}
	for ; p.workers < n; p.workers++ {
		p.startLocked()
	}
	for ; p.workers > n; p.workers-- {
		p.runq <- nil // one worker exits after its current task
	}
}

func (p *workerPool) startLocked() {
	p.wg.Add(1)
	go p.run()
}

// lendSpare starts an extra worker while a task of this pool waits at a
// Checkpoint without a slot; returnSpare stops one again.
func (p *workerPool) lendSpare() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.stopped {
		p.spares++
		p.startLocked()
	}
}

func (p *workerPool) returnSpare() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.spares > 0 { // stop may already have stopped them all
		p.spares--
		p.runq <- nil
	}
}

// stop stops every worker and spare, each after its current task.
func (p *workerPool) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopped = true
	for ; p.workers > 0; p.workers-- {
		p.runq <- nil
	}
	for ; p.spares > 0; p.spares-- {
		p.runq <- nil
	}
}

func (p *workerPool) run() {
	stopped := false // the loop ended on a stop sentinel, not by Goexit or retirement
	defer func() {
		if !stopped { // a task called runtime.Goexit, or the thread retired: take this worker's place
			p.mu.Lock()
			if !p.stopped {
				p.startLocked()
			}
			p.mu.Unlock()
		}
		p.wg.Done()
	}()
	if p.guard == nil {
		stopped = p.loop(nil)
		return
	}
	// The thread is locked for the worker's whole life and never unlocked:
	// it exits with the goroutine, taking a changed priority with it.
	osthread.LockNonMain(func() {
		w := p.guard.Register(osthread.Gettid())
		defer p.guard.Unregister(w)
		stopped = p.loop(w)
	})
}

// loop runs tasks until a stop sentinel (true) or until the guard retires
// the worker's thread (false; the task at hand goes back to the queue).
func (p *workerPool) loop(w *demote.Worker) bool {
	for t := range p.runq {
		if t == nil {
			return true
		}
		// Run t, then each task granted to this pool at the end of the
		// one before (keepNext), without going through runq.
		for t != nil {
			if w == nil {
				t = p.runTask(t)
				continue
			}
			if !p.guard.Adjust(w) {
				p.runq <- t // runq never holds more than slots + sentinels: room enough
				return false
			}
			w.SetBusy(true)
			t = p.runTask(t)
			w.SetBusy(false)
		}
	}
	return true
}
