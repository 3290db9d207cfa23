package cpuwork

import "time"

// waiter is a queued claim on a slot: a blocked Do caller or Checkpoint
// (ready is signalled), or an asynchronous task (sent to a worker).
type waiter struct {
	prev, next *waiter
	ready      chan struct{}
	task       *Task
	enq        int64 // now() when queued
	est        int64 // slot time charged to inflight at grant
	class      Class
	queued     bool
	granted    bool
	requeued   bool // a running task that yielded at a Checkpoint
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

type waitQueue struct {
	head, tail *waiter
	n          int
}

func (q *waitQueue) pushBack(w *waiter) {
	w.prev, w.next, w.queued = q.tail, nil, true
	if q.tail != nil {
		q.tail.next = w
	} else {
		q.head = w
	}
	q.tail = w
	q.n++
}

func (q *waitQueue) pushFront(w *waiter) {
	w.prev, w.next, w.queued = nil, q.head, true
	if q.head != nil {
		q.head.prev = w
	} else {
		q.tail = w
	}
	q.head = w
	q.n++
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
}

func (q *waitQueue) popFront() *waiter {
	w := q.head
	if w != nil {
		q.remove(w)
	}
	return w
}

// epoch anchors now(); time.Since on a monotonic reading costs one clock
// read (~25 ns here), half of time.Now.
var epoch = time.Now()

func now() int64 { return int64(time.Since(epoch)) }
