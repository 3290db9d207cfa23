package cpuwork

import (
	"math"
	"time"
)

// waiterKind says how a granted waiter is woken and what it counts as.
type waiterKind uint8

const (
	// waitCaller is a blocked Do caller, or a task waiting at a
	// Checkpoint for its slot back: ready is signalled.
	waitCaller waiterKind = iota
	// waitTask is an asynchronous task (Go): it is sent to a worker.
	waitTask
	// waitHelper is a For loop's helper waiting for a slot to run more
	// chunks of its loop (ready is signalled). Not a submission: it is
	// never counted in Stats, never refused and never shed.
	waitHelper
)

// waiter is a queued claim on a slot.
type waiter struct {
	prev, next *waiter
	ready      chan struct{}
	task       *Task
	// refused is set when the waiter was taken out of the queue because
	// its latency target could no longer be met (order.go): it is woken
	// without a slot and returns this error.
	refused *shedError
	enq     int64 // now() when queued
	est     int64 // slot time charged to inflight at grant
	// work is the expected run time, ns: the one given with its target
	// (Target.Service) from setDue, else its class's average slot time at
	// its first enqueue; counted in its queue's work while queued.
	work int64
	// due orders the waiters of a class: arrival + latency target, the
	// arrival itself without a target (FIFO), see order.go. dueSet says
	// it has been computed (a task admitted on the fast path computes it
	// only when a Checkpoint needs it).
	due     int64
	class   Class
	kind    waiterKind
	queued  bool
	granted bool
	// target says where due comes from: none (FIFO), an objective
	// (WithTarget or ClassOptions.LatencyTarget: a waiter expected to miss it
	// is refused beyond the class's late budget) or a ctx deadline (one
	// expected to miss its due is always refused); order.go.
	target   targetKind
	dueSet   bool
	requeued bool // a running task that yielded at a Checkpoint
	// started is set, under the executor's lock, when w is first granted
	// a slot: from then on w belongs to its running task, and only that
	// task (at a Checkpoint) may queue or dequeue it. See cancelableLocked.
	started bool
}

// cancelableLocked reports whether a cancellation from outside the task
// (its context's AfterFunc, or Close failing the queue) may remove w: only
// while w is queued and has never held a slot. A task re-queued at a
// Checkpoint is in the queue again, but its fn is running: its own
// Checkpoint handles its context's end.
func (w *waiter) cancelableLocked() bool { return w.queued && !w.started }

// waitQueue is one class's waiters in due order (ties in arrival order):
// a doubly linked list, so that a cancelled waiter leaves in O(1).
type waitQueue struct {
	head, tail *waiter
	n          int
	work       int64 // the queued waiters' expected run time, ns
}

// place returns the waiter after which a waiter due at due goes (nil: at
// the head), how many waiters are ahead of it and their expected run
// time. It walks from the tail past the waiters due later, so FIFO (every
// due is an arrival time) costs O(1) and a waiter with a shorter target
// passes only the waiters it overtakes.
func (q *waitQueue) place(due int64) (after *waiter, ahead int, work int64) {
	after, ahead, work = q.tail, q.n, q.work
	for after != nil && after.due > due {
		after, ahead, work = after.prev, ahead-1, work-after.work
	}
	return after, ahead, work
}

// insertAfter links w after p (nil: at the head).
func (q *waitQueue) insertAfter(p, w *waiter) {
	w.prev, w.queued = p, true
	if p == nil {
		w.next, q.head = q.head, w
	} else {
		w.next, p.next = p.next, w
	}
	if w.next != nil {
		w.next.prev = w
	} else {
		q.tail = w
	}
	q.n++
	q.work += w.work
}

func (q *waitQueue) remove(w *waiter) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		q.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		q.tail = w.prev
	}
	w.prev, w.next, w.queued = nil, nil, false
	q.n--
	q.work -= w.work
}

func (q *waitQueue) popFront() *waiter {
	w := q.head
	if w != nil {
		q.remove(w)
	}
	return w
}

// headDue is the due of the first waiter, math.MaxInt64 when empty.
func (q *waitQueue) headDue() int64 {
	if q.head == nil {
		return math.MaxInt64
	}
	return q.head.due
}

// epoch anchors now(); time.Since on a monotonic reading costs one clock
// read (~25 ns here), half of time.Now.
var epoch = time.Now()

func now() int64 { return int64(time.Since(epoch)) }
