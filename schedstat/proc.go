package schedstat

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Threads is the kernel's scheduling view of one process, summed over its
// threads at one instant.
type Threads struct {
	// OnCPU is the time the threads ran (field 1 of
	// /proc/PID/task/TID/schedstat, ns).
	OnCPU time.Duration `json:"on_cpu_ns"`
	// RunDelay is the time the threads were runnable but waited for a CPU
	// (field 2, ns): time the kernel gave to something else. The kernel
	// adds a wait to it when the thread finally runs (sched_info_arrive),
	// so a thread that is still waiting is counted later.
	RunDelay time.Duration `json:"run_delay_ns"`
	// Timeslices is the number of times the threads were put on a CPU
	// (field 3).
	Timeslices uint64 `json:"timeslices"`
	// Count is the number of threads read; Runnable those in state R.
	Count    int `json:"threads"`
	Runnable int `json:"runnable_threads"`
	// PerThread maps a thread ID to its counters, for deltas across
	// samples in which threads come and go.
	PerThread map[int]ThreadTimes `json:"-"`
}

// ThreadTimes are one thread's schedstat counters.
type ThreadTimes struct {
	OnCPU, RunDelay time.Duration
	Timeslices      uint64
}

// ErrNoSchedstat is wrapped when the kernel has no per-thread schedstat
// (CONFIG_SCHED_INFO off, or not Linux).
var ErrNoSchedstat = errors.New("schedstat: no /proc/PID/task/TID/schedstat here")

// ReadThreads reads /proc/PID/task/*/schedstat and stat of every thread of
// pid (0: the calling process). Threads that exit while it reads are
// skipped. It returns an error wrapping ErrNoSchedstat when the files do not
// exist, or fs.ErrPermission where the process is not readable. Cost: two
// small file reads per thread.
func ReadThreads(pid int) (Threads, error) {
	dir := "/proc/self/task"
	if pid > 0 {
		dir = fmt.Sprintf("/proc/%d/task", pid)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return Threads{}, fmt.Errorf("%w: %v", ErrNoSchedstat, err)
		}
		return Threads{}, fmt.Errorf("schedstat: %w", err)
	}
	t := Threads{PerThread: make(map[int]ThreadTimes, len(ents))}
	var missing error
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "schedstat"))
		if err != nil {
			missing = err
			continue // the thread exited, or no schedstat (checked below)
		}
		tt, err := parseSchedstat(b)
		if err != nil {
			return Threads{}, fmt.Errorf("schedstat: %s/%s/schedstat: %w", dir, e.Name(), err)
		}
		t.PerThread[tid] = tt
		t.OnCPU += tt.OnCPU
		t.RunDelay += tt.RunDelay
		t.Timeslices += tt.Timeslices
		t.Count++
		if st, err := os.ReadFile(filepath.Join(dir, e.Name(), "stat")); err == nil && statState(st) == 'R' {
			t.Runnable++
		}
	}
	if t.Count == 0 && missing != nil {
		if errors.Is(missing, os.ErrNotExist) {
			return Threads{}, fmt.Errorf("%w: %v", ErrNoSchedstat, missing)
		}
		return Threads{}, fmt.Errorf("schedstat: %w", missing)
	}
	return t, nil
}

// parseSchedstat reads a /proc/PID/task/TID/schedstat line: on-CPU ns,
// run delay ns, timeslices (Documentation/scheduler/sched-stats.rst).
func parseSchedstat(b []byte) (ThreadTimes, error) {
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ThreadTimes{}, fmt.Errorf("%q: want 3 fields", b)
	}
	var v [3]uint64
	for i := range v {
		var err error
		if v[i], err = strconv.ParseUint(f[i], 10, 64); err != nil {
			return ThreadTimes{}, err
		}
	}
	return ThreadTimes{OnCPU: sat(v[0]), RunDelay: sat(v[1]), Timeslices: v[2]}, nil
}

// statState returns the state letter of a /proc/PID/stat line (the field
// after the command name, which may contain ')'), or 0 if malformed.
func statState(st []byte) byte {
	i := strings.LastIndexByte(string(st), ')')
	if i < 0 || i+2 >= len(st) || st[i+1] != ' ' {
		return 0
	}
	return st[i+2]
}

// Sub returns the counters accumulated between prev and t by the threads
// present in both (a thread that exited in between takes its counts with
// it; one that started counts from zero).
func (t Threads) Sub(prev Threads) Threads {
	d := Threads{Count: t.Count, Runnable: t.Runnable}
	for tid, now := range t.PerThread {
		was := prev.PerThread[tid]
		if now.OnCPU < was.OnCPU { // a reused TID
			was = ThreadTimes{}
		}
		d.OnCPU += now.OnCPU - was.OnCPU
		d.RunDelay += now.RunDelay - was.RunDelay
		d.Timeslices += now.Timeslices - was.Timeslices
	}
	return d
}

func sat(ns uint64) time.Duration {
	if ns > 1<<63-1 {
		return 1<<63 - 1
	}
	return time.Duration(ns)
}

// Pressure is a cgroup v2 (or host) cpu.pressure reading: the share of
// wall time in which some runnable task waited for a CPU (PSI, kernel
// Documentation/accounting/psi.rst).
type Pressure struct {
	File       string        `json:"file"`
	SomeAvg10  float64       `json:"some_avg10"` // percent, last 10 s
	SomeAvg60  float64       `json:"some_avg60"`
	SomeTotal  time.Duration `json:"some_total_ns"`
	Available  bool          `json:"available"`
	Unreadable string        `json:"unreadable,omitempty"` // why, when not available
}

// ReadPressure reads file (a cgroup's cpu.pressure or /proc/pressure/cpu).
func ReadPressure(file string) Pressure {
	b, err := os.ReadFile(file)
	if err != nil {
		return Pressure{File: file, Unreadable: err.Error()}
	}
	return parsePressure(file, b)
}

// parsePressure reads a PSI file's "some" line (avg10, avg60, total).
func parsePressure(file string, b []byte) Pressure {
	p := Pressure{File: file}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "some" {
			continue
		}
		for _, kv := range f[1:] {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "avg10":
				p.SomeAvg10, _ = strconv.ParseFloat(v, 64)
			case "avg60":
				p.SomeAvg60, _ = strconv.ParseFloat(v, 64)
			case "total":
				us, _ := strconv.ParseUint(v, 10, 64)
				// Saturate in microseconds: a total near the uint64 range
				// (a corrupt file; the fuzzer's 2001700000000000000 µs)
				// overflowed to a negative Duration once multiplied.
				if us > uint64(1<<63-1)/uint64(time.Microsecond) {
					p.SomeTotal = 1<<63 - 1
				} else {
					p.SomeTotal = time.Duration(us) * time.Microsecond
				}
			}
		}
		p.Available = true
	}
	if !p.Available {
		p.Unreadable = "no \"some\" line"
	}
	return p
}
