//go:build !linux

package cpuwork

// Outside Linux there is no per-thread schedstat nor cgroup: accounts have
// queue_wait, go_run_queue, gc and other, and say they are partial.

func readThread() threadStretch { return threadStretch{} }

func parseThreadSchedstat(b []byte) (cpu, delay int64, ok bool) { return 0, 0, false }

type cgroupClock struct{}

func newCgroupClock(dir string) *cgroupClock { return nil }

func (c *cgroupClock) read() (uint64, bool) { return 0, false }

func (c *cgroupClock) close() {}
