package cpuwork

import (
	"context"

	"github.com/cpuwork/cpuwork/internal/admission"
)

// Close stops admission: from now on every submission returns ErrClosed.
// Queued tasks keep being admitted as slots free up until ctx ends; then
// the ones still queued fail with ErrClosed (their submitters get it from
// Do or Task.Wait). Close waits for running tasks up to ctx and returns
// nil once everything finished, workers and the critical lane stopped, or
// ctx's error if ctx ends first. In that case the executor still stops its
// workers and lane by itself when the last running task ends (nothing
// polls). Calling Close again waits again. A nil ctx panics.
func (e *Executor) Close(ctx context.Context) error {
	mustCtx(ctx)
	mustExec(e)
	e.g.Close(false)
	e.closeOnce.Do(func() {
		if e.watchStop != nil {
			e.watchStop()
			<-e.watchDone
		}
		if e.fracStop != nil {
			close(e.fracStop) // opens the extra slot so queued work can drain
			<-e.fracDone
		}
		go func() { // lives until the last task ends
			<-e.drained
			e.shutdown()
		}()
	})
	e.checkDrained()
	select {
	case <-e.shutDown:
		return e.laneErr
	case <-ctx.Done():
		e.failQueued()
		return ctx.Err()
	}
}

// checkDrained closes e.drained once the executor is closed and idle. Every
// path that can make it idle after Close calls it: a task's finish, a
// queued waiter's cancellation or failure, a slot given back unused.
func (e *Executor) checkDrained() {
	if e.g.Closed() && e.idle() {
		e.drainOnce.Do(func() { close(e.drained) })
	}
}

// shutdown stops the workers and the critical lane of a drained executor.
func (e *Executor) shutdown() {
	e.stopWorkers()
	for _, p := range e.pools {
		p.wg.Wait()
	}
	if e.guard != nil {
		e.guard.Close()
	}
	if e.batchGroup != nil {
		if err := e.batchGroup.Close(); err != nil {
			e.log.Warn("cpuwork: remove the batch cgroup", "err", err)
		}
	}
	if e.critLane != nil {
		e.laneErr = e.critLane.Close(context.Background()) // its tasks are done: it stops at once
	}
	e.closeAccounting()
	close(e.shutDown)
}

// closeAccounting releases accounting's descriptor, if accounting is on.
func (e *Executor) closeAccounting() {
	if e.acct != nil {
		e.acct.close()
	}
}

// idle reports whether no task is queued or running. The queue and the
// admissions are read under the granter's lock: a grant takes a waiter
// out of the queue and counts its admission in one section of it, so
// idle sees both or neither (read apart, an empty queue and an
// admission not yet counted made a task about to run look drained).
// Admissions on the fast path are counted without the lock, before
// their own check of Close (admitFast).
func (e *Executor) idle() bool {
	return e.g.Quiet(func() bool {
		for c := range e.stats {
			if !e.stats[c].idle() {
				return false
			}
		}
		return true
	})
}

// failQueued fails every queued waiter with ErrClosed.
func (e *Executor) failQueued() {
	var tasks []*Task
	for _, w := range e.g.Close(true) {
		if w.Kind() == admission.KindTask && !w.Requeued() {
			tasks = append(tasks, w.Task().(*Task))
		} else {
			w.Signal() // granted stays false: closed out
		}
	}
	for _, t := range tasks {
		if t.stop != nil {
			t.stop()
		}
		e.stats[t.tc.class].Rejected.Add(1)
		t.err = ErrClosed
		close(t.done)
	}
	e.checkDrained()
}

func (e *Executor) stopWorkers() {
	for _, p := range e.pools {
		p.stop()
	}
}

// idle reports whether every task of the class that got a slot has
// finished. completed is read before admitted: a task counted in
// completed was admitted before, so it is in admitted too, and equal
// counts mean nothing runs. Read the other way round, a task admitted
// and finished between the two reads made up for one still running, and
// Close returned while it ran.
func (s *classStats) idle() bool {
	done := s.Completed.Load()
	return s.Admitted.Load() == done
}
