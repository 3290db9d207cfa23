package admission

// The Waiter: a submission's claim on a slot, and what the executor may
// set and read of it.

// Kind says how a granted Waiter is woken and what it counts as.
type Kind uint8

const (
	// KindCaller is a blocked Do caller, or a task waiting at a
	// Checkpoint for its slot back: ready is signalled.
	KindCaller Kind = iota
	// KindTask is an asynchronous task (Go): it is sent to a worker.
	KindTask
	// KindHelper is a For loop's helper waiting for a slot to run more
	// chunks of its loop (ready is signalled). Not a submission: it is
	// never counted in Stats, never refused and never shed.
	KindHelper
)

// Waiter is a submission's claim on a slot, queued or granted: the one
// value the executor and the core share for it. Its fields are the
// core's; the executor makes one with MakeWaiter or MakeHelper (or
// Reuse, to reuse a record's) and reads it through the methods below.
// A Waiter must not be copied while it is queued or granted.
type Waiter struct {
	prev, next *Waiter
	ready      chan struct{}
	task       any // the executor's task (KindTask)
	// refused is set when the Waiter was taken out of the queue because
	// its latency target could no longer be met (door.go): it is woken
	// without a slot and returns this error.
	refused *shedError
	enq     int64 // g.now() when queued
	est     int64 // slot time charged to inflight at grant
	// work is the expected run time, ns: the one given with its target
	// (Target.Service) from setDue, scaled by what the slots have taken
	// for given run times (scaledService), else its class's average slot
	// time at its first enqueue; counted in its queue's work while queued.
	work int64
	// declared is the run time given with its target (Target.Service),
	// ns, unscaled; 0: none.
	declared int64
	// span is how many slots the task runs on at once when it is a For
	// loop's caller (its helpers' slots, up to the loop's bound), for
	// the queue's slot time (slotWork); 0 or 1: one.
	span int32
	// due orders the waiters of a class: arrival + latency target, the
	// arrival itself without a target (FIFO), see order.go. dueSet says
	// it has been computed (a task admitted on the fast path computes it
	// only when a Checkpoint needs it).
	due int64
	// rank is w's place in its class's queue: its due plus its key's
	// lead past its share (keys.go); its due without a key.
	rank    int64
	class   Class
	kind    Kind
	queued  bool
	granted bool
	// target says where due comes from: none (FIFO), an objective
	// (WithTarget or ClassOptions.LatencyTarget: a Waiter expected to miss it
	// is refused beyond the class's late budget) or a ctx deadline (one
	// expected to miss its due is always refused); order.go.
	target targetKind
	// hard is the ctx deadline of a Waiter whose due is an objective
	// earlier than it, ns (0: none): the late budget lets the objective
	// be missed, never this (door.go).
	hard     int64
	dueSet   bool
	requeued bool // a running task that yielded at a Checkpoint
	// started is set, under the executor's lock, when w is first granted
	// a slot: from then on w belongs to its running task, and only that
	// task (at a Checkpoint) may queue or dequeue it. See cancelableLocked.
	started bool
	// key is the sharer w's task is charged to (nil: none: no task of its
	// class carried a key), entry its key's entry while the key has not
	// earned a share (nil: none, earned, or untracked), keyCharge the
	// expected slot time it was charged when it passed the door, until
	// its task ends (keys.go).
	key       *keyState
	entry     *keyState
	keyCharge int64
	keyPast   bool // its sharer was past its share when it arrived (keySpared)
}

// cancelableLocked reports whether a cancellation from outside the task
// (its context's AfterFunc, or Close failing the queue) may remove w: only
// while w is queued and has never held a slot. A task re-queued at a
// Checkpoint is in the queue again, but its fn is running: its own
// Checkpoint handles its context's end.
func (w *Waiter) cancelableLocked() bool { return w.queued && !w.started }

// MakeWaiter is the Waiter of a submission of class c: a blocked caller
// (KindCaller) or an asynchronous task (KindTask), whose task is the
// value Owner.Wake receives (Task).
func MakeWaiter(c Class, k Kind, task any) Waiter {
	return Waiter{class: c, kind: k, task: task}
}

// MakeHelper is the Waiter of a For loop's helper of class c, queued at
// its loop's due (its rank too: a helper has no key).
func MakeHelper(c Class, due int64) Waiter {
	return Waiter{class: c, kind: KindHelper, due: due, rank: due, dueSet: true}
}

// Spare is what a Waiter's next use keeps of it: its wake-up channel (a
// reused record allocates none).
type Spare struct{ ready chan struct{} }

// Spare is what w's record keeps for its next Waiter. w must be neither
// queued nor granted.
func (w *Waiter) Spare() Spare { return Spare{w.ready} }

// Reuse makes the zero Waiter w a caller's Waiter of class c with s's
// channel.
func (w *Waiter) Reuse(s Spare, c Class) { w.ready, w.class = s.ready, c }

// SetSpan sets how many slots the task runs on at once (a For loop's
// caller: its helpers' too), for the queue's expected slot time; n < 2
// is one. Set before the Waiter queues.
func (w *Waiter) SetSpan(n int) { w.span = int32(n) }

// SetArrival sets the time the task's wait and latency target count
// from (g.now's clock, ns): for a task admitted at once that has a
// target, or one queuing again after a park.
func (w *Waiter) SetArrival(t int64) { w.enq = t }

// Arrival is the time w's wait counts from (Admit and Requeue set it).
func (w *Waiter) Arrival() int64 { return w.enq }

// Class is w's class.
func (w *Waiter) Class() Class { return w.class }

// Kind is who waits on w: a caller, a task or a For helper.
func (w *Waiter) Kind() Kind { return w.kind }

// Task is the submitter's value given to MakeWaiter (KindTask: what
// Owner.Wake runs).
func (w *Waiter) Task() any { return w.task }

// Ranked is w's rank once computed (Rank, Admit), and whether it is.
func (w *Waiter) Ranked() (rank int64, ok bool) { return w.rank, w.dueSet }

// Requeued reports whether w is the Waiter of a running task queued
// again at a Checkpoint (a hand-over or a park), until its wait ends.
func (w *Waiter) Requeued() bool { return w.requeued }

// MarkStarted records that w's task holds a slot without having queued
// (a Go task admitted at once): no cancellation may take it out.
func (w *Waiter) MarkStarted() { w.started = true }

// TakeGrant reports whether w was granted its slot from the queue (a Go
// task woken by Owner.Wake), and clears the mark: once per grant.
func (w *Waiter) TakeGrant() bool {
	g := w.granted
	w.granted = false
	return g
}

// Late reports whether a task with a latency target or deadline that
// ended at end (ns) ended after its due.
func (w *Waiter) Late(end int64) bool { return w.HasTarget() && end > w.due }

// Refusal is the error of a waiter refused at the head of its queue (its
// latency target could no longer be met, or it was the backlog of a
// standing queue), nil otherwise.
func (w *Waiter) Refusal() error {
	if w.refused == nil {
		return nil
	}
	return w.refused
}

// makeReady makes w's wake-up channel (capacity 1) once: a waiter that
// blocks needs it; a Go task queued once needs none.
func (w *Waiter) makeReady() {
	if w.ready == nil {
		w.ready = make(chan struct{}, 1)
	}
}

// Signal wakes the one goroutine that waits on w's channel: a caller or
// helper blocked in Await, a task waiting on its worker for its slot back
// after a Checkpoint, or a waiter closed out by Close. It is the only
// send on a waiter's channel; each wake is one send, taken by one
// receive.
func (w *Waiter) Signal() { w.ready <- struct{}{} }

// HasTarget reports whether w's due comes from a latency target or a
// ctx deadline (false: FIFO, or let through late once).
func (w *Waiter) HasTarget() bool { return w.target != targetNone }
