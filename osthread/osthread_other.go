//go:build !linux

package osthread

import (
	"fmt"
	"runtime"
)

// ApplyThread applies s to thread tid of this process. Outside Linux only
// the zero Sched (change nothing) is accepted; anything else returns an
// error wrapping ErrUnsupported.
func (s Sched) ApplyThread(tid int) error {
	if err := s.validate(); err != nil {
		return err
	}
	if s.Policy == Inherit && s.CPUs == nil {
		return nil
	}
	return fmt.Errorf("osthread: %w: thread scheduling (%s, nice %d, CPUs %v) is Linux-only (GOOS %s)",
		ErrUnsupported, s.Policy, s.Nice, s.CPUs, runtime.GOOS)
}

// ThreadSched returns an error wrapping ErrUnsupported outside Linux.
func ThreadSched(tid int) (Sched, error) {
	return Sched{}, fmt.Errorf("osthread: %w: reading thread scheduling is Linux-only (GOOS %s)", ErrUnsupported, runtime.GOOS)
}

// ThreadStat returns an error wrapping ErrUnsupported outside Linux.
func ThreadStat(pid, tid int) (policy Policy, nice, rtprio int, err error) {
	return 0, 0, 0, fmt.Errorf("osthread: %w: /proc is Linux-only (GOOS %s)", ErrUnsupported, runtime.GOOS)
}

// LockNonMain calls fn on a goroutine locked to an OS thread, and returns
// when fn returns. Outside Linux no thread's scheduling can be changed, so
// the thread is unlocked again afterwards.
func LockNonMain(fn func()) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	fn()
}

// Supported reports whether this system lets the package change a
// thread's scheduling: false outside Linux.
const Supported = false

// Gettid returns 0: kernel thread IDs are Linux's.
func Gettid() int { return 0 }
