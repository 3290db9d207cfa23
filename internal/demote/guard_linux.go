package demote

import "golang.org/x/sys/unix"

// threadClock is the clockid of thread tid's CPU-time clock
// (MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED) in the kernel's
// include/linux/posix-timers.h; what glibc's pthread_getcpuclockid makes).
func threadClock(tid int) int32 {
	const cpuclockSched, perThread = 2, 4
	return int32(^uint32(tid)<<3) | cpuclockSched | perThread
}

// threadCPU reads a thread CPU-time clock made by threadClock, in ns. It is
// current even while the thread waits for a CPU.
func threadCPU(clock int32) (int64, bool) {
	var ts unix.Timespec
	if unix.ClockGettime(clock, &ts) != nil {
		return 0, false
	}
	return ts.Nano(), true
}
