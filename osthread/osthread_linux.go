package osthread

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

var kernelPolicy = [...]uint32{Other: unix.SCHED_NORMAL, Batch: unix.SCHED_BATCH, Idle: unix.SCHED_IDLE, FIFO: unix.SCHED_FIFO, RR: unix.SCHED_RR}

// policyOf maps a kernel SCHED_* number to a Policy.
func policyOf(k uint32) Policy {
	for p, v := range kernelPolicy {
		if p != int(Inherit) && v == k {
			return Policy(p)
		}
	}
	return Policy(-int(k) - 1) // unknown to this package; String shows the number
}

// ApplyThread applies s to thread tid of this process (sched_setattr(2)
// and sched_setaffinity(2) on that thread only). Use it on a thread that
// a goroutine keeps locked, for example to undo a demotion; the same
// permission rules and errors as ApplyCurrent apply.
func (s Sched) ApplyThread(tid int) error {
	if err := s.validate(); err != nil {
		return err
	}
	if s.CPUs != nil {
		var set unix.CPUSet
		for _, c := range s.CPUs {
			set.Set(c)
		}
		if err := unix.SchedSetaffinity(tid, &set); err != nil {
			return fmt.Errorf("osthread: sched_setaffinity(%d, %v): %w", tid, s.CPUs, err)
		}
	}
	if s.Policy == Inherit {
		return nil
	}
	attr := unix.SchedAttr{
		Size:     unix.SizeofSchedAttr,
		Policy:   kernelPolicy[s.Policy],
		Nice:     int32(s.Nice),
		Priority: uint32(s.RTPriority),
	}
	if err := unix.SchedSetAttr(tid, &attr, 0); err != nil {
		if errors.Is(err, unix.EPERM) {
			return fmt.Errorf("%w: sched_setattr(%d, %s, nice %d, rtprio %d) needs CAP_SYS_NICE (negative nice, SCHED_FIFO/RR, or leaving SCHED_IDLE): %v",
				ErrPermission, tid, s.Policy, s.Nice, s.RTPriority, err)
		}
		return fmt.Errorf("osthread: sched_setattr(%d, %s): %w", tid, s.Policy, err)
	}
	return nil
}

// ThreadSched reads thread tid's scheduling (a thread of this process or,
// with permission, another).
func ThreadSched(tid int) (Sched, error) {
	attr, err := unix.SchedGetAttr(tid, 0)
	if err != nil {
		return Sched{}, fmt.Errorf("osthread: sched_getattr(%d): %w", tid, err)
	}
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(tid, &set); err != nil {
		return Sched{}, fmt.Errorf("osthread: sched_getaffinity(%d): %w", tid, err)
	}
	s := Sched{Policy: policyOf(attr.Policy), Nice: int(attr.Nice), RTPriority: int(attr.Priority)}
	for c := 0; c < 1024; c++ {
		if set.IsSet(c) {
			s.CPUs = append(s.CPUs, c)
		}
	}
	return s, nil
}

// ThreadStat reads policy, nice and real-time priority of thread tid of
// process pid from /proc/PID/task/TID/stat (fields 41, 19 and 40 of
// proc(5)), an independent check of what sched_getattr reports.
func ThreadStat(pid, tid int) (policy Policy, nice, rtprio int, err error) {
	p := fmt.Sprintf("/proc/%d/task/%d/stat", pid, tid)
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("osthread: %w", err)
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, 0, fmt.Errorf("osthread: %s: no command field", p)
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3 (state)
	if len(f) < 39 {
		return 0, 0, 0, fmt.Errorf("osthread: %s: %d fields", p, len(f)+2)
	}
	field := func(n int) (int, error) { return strconv.Atoi(f[n-3]) }
	if nice, err = field(19); err != nil {
		return 0, 0, 0, fmt.Errorf("osthread: %s: nice: %w", p, err)
	}
	if rtprio, err = field(40); err != nil {
		return 0, 0, 0, fmt.Errorf("osthread: %s: rt_priority: %w", p, err)
	}
	pol, err := field(41)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("osthread: %s: policy: %w", p, err)
	}
	return policyOf(uint32(pol)), nice, rtprio, nil
}

// LockNonMain calls fn on a goroutine locked to an OS thread that is not
// the process's main thread, and returns when fn returns. That thread is
// never unlocked (its goroutine exits locked and the runtime discards it),
// so fn may change its scheduling. If LockOSThread lands on the main
// thread, the caller keeps it occupied while a new goroutine locks another
// thread, then releases the main thread unchanged.
func LockNonMain(fn func()) {
	runtime.LockOSThread()
	if unix.Gettid() != unix.Getpid() {
		fn()
		return // exit locked: the runtime discards the thread
	}
	// On the main thread: hold it so the next lock lands elsewhere.
	done := make(chan struct{})
	go func() {
		defer close(done)
		LockNonMain(fn)
	}()
	<-done
	runtime.UnlockOSThread() // unchanged main thread: safe to release
}

// Supported reports whether this system lets the package change a
// thread's scheduling: true on Linux.
const Supported = true

// Gettid returns the calling thread's kernel thread ID (gettid(2)); 0 on a
// system other than Linux.
func Gettid() int { return unix.Gettid() }
