//go:build !linux

package demote

// Outside Linux there is no demotion (osthread.Supported is false), so the
// starvation guard never samples a thread.

func threadClock(tid int) int32 { return 0 }

func threadCPU(clock int32) (int64, bool) { return 0, false }
