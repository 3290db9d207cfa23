package cpuwork

import (
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/cpuwork/cpuwork/internal/cgroupfs"
	"golang.org/x/sys/unix"
)

// threadFiles caches an open /proc/self/task/TID/schedstat per thread, so
// a reading is one gettid and one pread. A thread that exited leaves a
// descriptor that fails to read: it is closed and the file opened again
// (a new thread may have the id).
var threadFiles sync.Map // int -> *os.File

// readThread reads the calling thread's schedstat: on-CPU time, run delay
// (ns; Documentation/scheduler/sched-stats.rst, "/proc/<pid>/schedstat").
func readThread() threadStretch {
	tid := unix.Gettid()
	var buf [96]byte
	for attempt := 0; attempt < 2; attempt++ {
		var f *os.File
		if v, ok := threadFiles.Load(tid); ok {
			f = v.(*os.File)
		} else {
			var err error
			f, err = os.Open(filepath.Join("/proc/self/task", strconv.Itoa(tid), "schedstat"))
			if err != nil {
				return threadStretch{}
			}
			if old, loaded := threadFiles.LoadOrStore(tid, f); loaded {
				f.Close()
				f = old.(*os.File)
			}
		}
		n, err := f.ReadAt(buf[:], 0)
		if n > 0 {
			cpu, delay, ok := parseThreadSchedstat(buf[:n])
			return threadStretch{tid: tid, cpu: cpu, delay: delay, t: now(), ok: ok}
		}
		_ = err
		if threadFiles.CompareAndDelete(tid, f) {
			f.Close()
		}
	}
	return threadStretch{}
}

// parseThreadSchedstat reads the first two fields of a schedstat line.
func parseThreadSchedstat(b []byte) (cpu, delay int64, ok bool) {
	var v [2]int64
	i := 0
	for f := 0; f < 2; f++ {
		for i < len(b) && b[i] == ' ' {
			i++
		}
		start := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == start || i-start > 18 {
			return 0, 0, false
		}
		x, err := strconv.ParseInt(string(b[start:i]), 10, 64)
		if err != nil {
			return 0, 0, false
		}
		v[f] = x
	}
	return v[0], v[1], true
}

// cgroupClock reads nr_throttled of one cgroup's cpu.stat through a
// descriptor kept open.
type cgroupClock struct {
	mu  sync.Mutex
	f   *os.File
	buf []byte
}

func newCgroupClock(dir string) *cgroupClock {
	f, err := os.Open(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		return nil
	}
	return &cgroupClock{f: f, buf: make([]byte, 4096)}
}

func (c *cgroupClock) read() (uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, _ := c.f.ReadAt(c.buf, 0)
	if n <= 0 {
		return 0, false
	}
	st, err := cgroupfs.ParseCPUStat(c.buf[:n])
	if err != nil {
		return 0, false
	}
	return st.ThrottledPeriods, true
}

func (c *cgroupClock) close() { c.f.Close() }
