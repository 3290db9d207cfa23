// Package osthread runs goroutines on OS threads whose Linux scheduling it
// controls: lanes of goroutines, each locked to its own thread
// (runtime.LockOSThread) for its whole life, with a scheduling policy
// (SCHED_OTHER, SCHED_BATCH, SCHED_IDLE, SCHED_FIFO, SCHED_RR), a nice value
// and a CPU affinity applied to that thread only.
//
// # Why demote rather than promote
//
// A goroutine needs a P to run Go code. When every P is held by CPU-bound
// goroutines, raising an urgent thread's priority does nothing: the urgent
// goroutine waits in a run queue for async preemption (10 ms),
// whatever its thread's priority.
// What works, without privileges, is the reverse: run batch work on threads
// demoted to SCHED_IDLE (or nice 19) and keep one P more than batch threads,
// so latency-sensitive goroutines always find a P, and the kernel preempts
// the idle-class batch thread the instant their thread wants the CPU
// (sched(7)).
//
// # Rules this package keeps
//
//   - A thread whose scheduling was changed is never unlocked: after
//     UnlockOSThread the runtime would run unrelated goroutines on it with
//     the changed priority. Lane goroutines exit while still locked, and the
//     runtime then discards the thread.
//   - A lane never runs on the process's main thread (whose priority and
//     affinity other tools read as the process's): if LockOSThread lands on
//     it, the goroutine keeps it occupied while a fresh goroutine locks
//     another thread, then releases it unchanged.
//   - Unprivileged processes may raise nice and enter SCHED_BATCH or
//     SCHED_IDLE; negative nice, SCHED_FIFO/RR and leaving SCHED_IDLE need
//     CAP_SYS_NICE (or RLIMIT_NICE/RLIMIT_RTPRIO). Such a request fails with
//     an error naming the capability, wrapping ErrPermission.
package osthread

import (
	"errors"
	"fmt"
	"strconv"
)

// Policy is a Linux scheduling policy (sched(7)), or Inherit. Its values
// are this package's, not the kernel's SCHED_* numbers, so that the zero
// value can mean "leave the thread's policy as it is".
type Policy int

const (
	// Inherit, the zero value, leaves the thread's policy and nice value
	// as they are (a new thread inherits both from the thread that made
	// it). A zero Sched therefore changes nothing but, if set, the CPUs.
	Inherit Policy = iota
	// Other is SCHED_OTHER (SCHED_NORMAL), the default time-sharing policy.
	Other
	// Batch is SCHED_BATCH: like Other, but the scheduler assumes the
	// thread is CPU-bound and penalises its wake-ups slightly.
	Batch
	// Idle is SCHED_IDLE: runs only when nothing of another policy wants
	// the CPU, and is preempted at once when something does.
	Idle
	// FIFO is SCHED_FIFO, real-time first-in first-out (needs CAP_SYS_NICE).
	FIFO
	// RR is SCHED_RR, real-time round robin (needs CAP_SYS_NICE).
	RR
)

func (p Policy) String() string {
	switch p {
	case Inherit:
		return "inherited"
	case Other:
		return "SCHED_OTHER"
	case Batch:
		return "SCHED_BATCH"
	case Idle:
		return "SCHED_IDLE"
	case FIFO:
		return "SCHED_FIFO"
	case RR:
		return "SCHED_RR"
	}
	return "SCHED(" + strconv.Itoa(-int(p)-1) + ")"
}

// ErrPermission is wrapped by errors for scheduling changes the process is
// not allowed to make.
var ErrPermission = errors.New("osthread: permission denied")

// ErrUnsupported is wrapped by errors for scheduling changes this system
// cannot make: every change but the zero Sched outside Linux. Lanes still
// run there, as goroutines locked to threads with unchanged scheduling.
var ErrUnsupported = errors.ErrUnsupported

// Sched is the scheduling of one OS thread. The zero value leaves the
// thread as it is: applying it needs no privilege whatever the thread's
// current policy and nice value.
type Sched struct {
	// Policy is the policy to set; Inherit (zero) keeps the current policy
	// and nice value, and then Nice and RTPriority must be 0.
	Policy Policy
	// Nice is -20..19 for Other and Batch (ignored by the kernel for Idle,
	// FIFO and RR). Lower is more favoured; below the current value needs
	// CAP_SYS_NICE. With Policy Other, 0 sets nice 0.
	Nice int
	// RTPriority is 1..99 for FIFO and RR, 0 otherwise.
	RTPriority int
	// CPUs is the affinity mask as CPU numbers; nil leaves it unchanged.
	CPUs []int
}

// Demoted is the scheduling cpuwork gives batch threads: SCHED_IDLE.
var Demoted = Sched{Policy: Idle}

// Nice19 is the fallback demotion where SCHED_IDLE is refused: nice 19.
var Nice19 = Sched{Policy: Other, Nice: 19}

func (s Sched) validate() error {
	switch s.Policy {
	case Inherit:
		if s.Nice != 0 || s.RTPriority != 0 {
			return fmt.Errorf("osthread: nice %d / RTPriority %d need a Policy (the zero Policy keeps the thread's own)", s.Nice, s.RTPriority)
		}
	case Other, Batch, Idle:
		if s.Nice < -20 || s.Nice > 19 {
			return fmt.Errorf("osthread: nice %d out of range -20..19", s.Nice)
		}
		if s.RTPriority != 0 {
			return fmt.Errorf("osthread: RTPriority %d is only for SCHED_FIFO and SCHED_RR", s.RTPriority)
		}
	case FIFO, RR:
		if s.RTPriority < 1 || s.RTPriority > 99 {
			return fmt.Errorf("osthread: %s needs RTPriority 1..99, got %d", s.Policy, s.RTPriority)
		}
	default:
		return fmt.Errorf("osthread: unknown policy %d", int(s.Policy))
	}
	for _, c := range s.CPUs {
		if c < 0 || c >= 1024 {
			return fmt.Errorf("osthread: CPU %d out of range 0..1023", c)
		}
	}
	return nil
}

// ApplyCurrent applies s to the calling goroutine's OS thread. The caller
// must have called runtime.LockOSThread and must never unlock the thread
// afterwards (let the goroutine exit locked). It returns an error wrapping
// ErrPermission, naming CAP_SYS_NICE, when the kernel refuses, and one
// wrapping ErrUnsupported for anything but the zero Sched on a system other
// than Linux.
func (s Sched) ApplyCurrent() error {
	return s.ApplyThread(Gettid())
}

// Current reads the calling thread's scheduling back from the kernel
// (sched_getattr(2) and sched_getaffinity(2)); ErrUnsupported on a system
// other than Linux.
func Current() (Sched, error) {
	return ThreadSched(Gettid())
}
