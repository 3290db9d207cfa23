package cpuwork

import (
	"sync"

	"github.com/cpuwork/cpuwork/osthread"
)

// workerPool runs asynchronous tasks: one worker per slot, plus spares lent
// while a task of the pool waits at a Checkpoint without a slot. All
// fields but runq are guarded by the executor's mutex.
type workerPool struct {
	name    string
	runq    chan *Task // granted tasks plus stop sentinels (nil) never exceed its capacity
	workers int
	spares  int
	// demote locks each worker to its own OS thread and applies sched
	// (falling back to nice 19 where the policy is refused).
	demote bool
	sched  osthread.Sched
	wg     sync.WaitGroup
	e      *Executor
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

func newPool(e *Executor, name string, demote bool, sched osthread.Sched) *workerPool {
	return &workerPool{name: name, runq: make(chan *Task, 2*MaxSlots+64), demote: demote, sched: sched, e: e}
}

// resizeLocked starts or stops workers so that n run (spares aside).
func (p *workerPool) resizeLocked(n int) {
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

// lendSpareLocked starts an extra worker while a task of this pool waits
// at a Checkpoint without a slot; returnSpareLocked stops one again.
func (p *workerPool) lendSpareLocked() {
	p.spares++
	p.startLocked()
}

func (p *workerPool) returnSpareLocked() {
	if p.spares > 0 { // Close may already have stopped them all
		p.spares--
		p.runq <- nil
	}
}

func (p *workerPool) stopLocked() {
	for ; p.workers > 0; p.workers-- {
		p.runq <- nil
	}
	for ; p.spares > 0; p.spares-- {
		p.runq <- nil
	}
}

func (p *workerPool) run() {
	stopped := false // the loop ended on a stop sentinel, not by Goexit
	defer func() {
		if !stopped { // a task called runtime.Goexit: take this worker's place
			p.e.mu.Lock()
			p.startLocked()
			p.e.mu.Unlock()
		}
		p.wg.Done()
	}()
	if !p.demote {
		p.loop()
		stopped = true
		return
	}
	// The thread is locked for the worker's whole life and never unlocked:
	// it exits with the goroutine, taking its changed priority with it.
	osthread.LockNonMain(func() {
		if err := p.sched.ApplyCurrent(); err != nil {
			if err2 := osthread.Nice19.ApplyCurrent(); err2 != nil {
				p.e.warnOnce("cpuwork: cannot demote batch worker threads; they run at normal priority", "err", err2)
			} else {
				p.e.warnOnce("cpuwork: batch worker threads demoted to nice 19 instead", "policy", p.sched.Policy.String(), "err", err)
			}
		}
		p.loop()
		stopped = true
	})
}

func (p *workerPool) loop() {
	for t := range p.runq {
		if t == nil {
			return
		}
		p.e.runTask(t)
	}
}
