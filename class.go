package cpuwork

import "github.com/cpuwork/cpuwork/internal/admission"

// Class is a task's priority class. Lower values are more urgent.
type Class uint8

const (
	// Critical work is admitted strictly first: a freed slot goes to a
	// queued Critical task before any other, and lower-class tasks that
	// call Checkpoint hand their slot over while Critical work waits.
	Critical Class = iota
	// Interactive is the default class for request-serving CPU work. It
	// shares slots with Batch by weight (ClassOptions.Weight, 64:1 by default).
	Interactive
	// Batch is throughput work. It runs on executor-owned worker
	// goroutines and shares slots with Interactive by weight.
	Batch
	// Background work gets the slots that no other class waits for, with
	// a starvation guard: a queued Background task is admitted after
	// 64 grants to other classes or once it has waited 1 s, whichever
	// comes first.
	Background

	numClasses = 4
)

// String returns the class's lower-case name ("critical", ...), the value of
// the cpuwork.class profiler label.
func (c Class) String() string {
	return admission.Class(c).String() // one list of names, the admission core's
}

func (c Class) valid() bool { return c < numClasses }

// runsOnWorker reports whether tasks of c run on executor-owned worker
// goroutines even when submitted with Do. Batch and Background do, so that
// their threads can be demoted without touching the caller's thread.
func (c Class) runsOnWorker() bool { return c >= Batch }
