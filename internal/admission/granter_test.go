package admission

import (
	"testing"
	"time"
)

// A waiter granted a slot leaves the queue and is counted as admitted in
// one section of the granter's lock. The executor's Close asks Quiet
// whether nothing is queued and its idle check (admitted == completed)
// holds; Quiet must see both steps of a grant or neither: read between
// them (the queue already empty, the admission not yet counted), Close
// reported the executor drained while the granted task was about to run
// (the stress test once saw "Close returned drained while 1 tasks ran").
// The test holds the lock between the two steps while Quiet runs.
func TestQuietNeverSeesAGrantHalfDone(t *testing.T) {
	e := newExec(t, Options{Slots: 1})
	w := &Waiter{Class: Interactive, Kind: KindCaller, Ready: make(chan struct{}, 1)}
	w.Enq = now()
	idle := func() bool {
		s := &e.stats[Interactive]
		done := s.Completed.Load()
		return s.Admitted.Load() == done
	}
	e.g.lock()
	e.g.enqueueLocked(w)
	// The grant of dispatchLocked, in two steps with Quiet run between.
	if !e.g.free.take() {
		t.Fatal("no free slot")
	}
	if got := e.g.pickLocked(new(int64)); got != w {
		t.Fatalf("picked %p, want the waiter %p", got, w)
	}
	quiet := make(chan bool, 1)
	go func() { quiet <- e.g.Quiet(idle) }()
	time.Sleep(20 * time.Millisecond) // Quiet reads what it reads without the lock
	e.g.grantLocked(w, new(int64))
	e.g.unlockAndWake(nil)
	<-w.Ready
	if <-quiet {
		t.Error("Quiet reported no task queued or running while one was being granted its slot")
	}
	// The granted task runs and ends.
	e.stats[Interactive].Completed.Inc(0)
	e.g.Release(Interactive, &w.Est, nil)
	if !e.g.Quiet(idle) {
		t.Error("Quiet reported a task queued or running after it ended")
	}
}
