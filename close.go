package cpuwork

import (
	"context"
	"time"
)

// Close stops admission: from now on every submission returns ErrClosed.
// Queued tasks keep being admitted as slots free up until ctx ends; then
// the ones still queued fail with ErrClosed (their submitters get it from
// Do or Task.Wait). Close waits for running tasks up to ctx, stops the
// workers once they are done, and returns nil if everything finished or
// ctx's error if not. Calling Close again waits again.
func (e *Executor) Close(ctx context.Context) error {
	e.mu.Lock()
	e.closed.Store(true)
	e.mu.Unlock()
	e.closeOnce.Do(func() {
		if e.watchStop != nil {
			e.watchStop()
			<-e.watchDone
		}
		if e.pacerStop != nil {
			e.pacerStop() // resumes admission so queued batch work can drain
			<-e.pacerDone
		}
	})
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !e.idle() {
		select {
		case <-ctx.Done():
			e.failQueued()
			// Tasks admitted just before Close may still be on their way
			// to a worker: stop the workers only once nothing runs.
			go func() {
				for !e.idle() {
					time.Sleep(time.Millisecond)
				}
				e.stopWorkers()
			}()
			return ctx.Err()
		case <-tick.C:
		}
	}
	e.stopWorkers()
	for _, p := range e.pools {
		p.wg.Wait()
	}
	if e.critLane != nil {
		return e.critLane.Close(ctx)
	}
	return nil
}

// idle reports whether no task is queued or running.
func (e *Executor) idle() bool {
	if e.waiting.Load() != 0 {
		return false
	}
	for c := range e.stats {
		s := &e.stats[c]
		if s.admitted.Load() != s.completed.Load() {
			return false
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.waiting.Load() == 0
}

// failQueued fails every queued waiter with ErrClosed.
func (e *Executor) failQueued() {
	e.mu.Lock()
	var tasks []*Task
	for c := range e.queues {
		for w := e.queues[c].popFront(); w != nil; w = e.queues[c].popFront() {
			e.dequeuedLocked(Class(c))
			if w.task != nil && !w.requeued {
				tasks = append(tasks, w.task)
			} else {
				w.ready <- struct{}{} // granted stays false: closed out
			}
		}
	}
	e.mu.Unlock()
	for _, t := range tasks {
		if t.stop != nil {
			t.stop()
		}
		e.stats[t.tc.class].rejected.Add(1)
		t.err = ErrClosed
		close(t.done)
	}
}

func (e *Executor) stopWorkers() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, p := range e.pools {
		p.stopLocked()
	}
}
