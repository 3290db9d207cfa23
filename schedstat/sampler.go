// Package schedstat samples what decides the latency of CPU-bound work in
// a Go process, from the Go runtime and from the kernel, cheaply enough to
// leave on: the runtime's scheduling latency and runnable goroutines
// (runtime/metrics), stop-the-world pauses, GC CPU, the kernel's run delay
// of the process's threads (/proc/self/task/*/schedstat: time runnable but
// not running, the mark of a CPU taken by something else), CFS throttling
// of the cgroup that sets the CPU quota (cpu.stat of the limiting cgroup,
// leaf or ancestor, from package budget), CPU pressure where the kernel
// has it, and an optional timer canary (timer lateness caused by busy Ps is
// invisible to /sched/latencies, Go issue 45632).
//
// A Sampler takes a sample every interval and keeps the deltas of the last
// one; Handler serves it as JSON for `cpuwork doctor --url`. It imports the
// standard library and this module's budget package only.
package schedstat

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"sync"
	"time"

	"github.com/cpuwork/cpuwork/budget"
	"github.com/cpuwork/cpuwork/internal/cputime"
)

// Options configures a Sampler. The zero value samples every second
// without a timer canary.
type Options struct {
	// Interval between samples; 0 means 1 s. At least 10 ms.
	Interval time.Duration
	// TimerCanary starts a goroutine that sleeps CanaryPeriod in a loop
	// and records how late it wakes (Sample.TimerLateness).
	TimerCanary bool
	// CanaryPeriod is the canary's sleep; 0 means 50 ms, at least 100 µs.
	// Each wake-up of an otherwise idle process wakes a thread, so a
	// shorter period costs more CPU; the lateness busy Ps cause (tens of
	// ms) shows at any period.
	CanaryPeriod time.Duration
}

// Sample is what happened in the process during one interval. Durations
// are totals over the interval; latencies are quantiles of what was
// recorded in it.
type Sample struct {
	Time     time.Time     `json:"time"`
	Interval time.Duration `json:"interval_ns"`

	GOMAXPROCS int `json:"gomaxprocs"`
	// Goroutines by scheduling state at the end of the interval
	// (/sched/goroutines/*; Go >= 1.26). GoroutineStates is false where the
	// runtime lacks them.
	GoroutineStates bool  `json:"goroutine_states"`
	Runnable        int64 `json:"runnable_goroutines"`
	Running         int64 `json:"running_goroutines"`
	Waiting         int64 `json:"waiting_goroutines"`
	NotInGo         int64 `json:"not_in_go_goroutines"` // in a syscall or cgo call (/sched/goroutines/not-in-go)
	Goroutines      int64 `json:"goroutines"`
	Threads         int64 `json:"threads"` // /sched/threads/total (Go >= 1.26), else /proc thread count

	// SchedLatency is the time goroutines spent runnable before running,
	// recorded in the interval (/sched/latencies:seconds).
	SchedLatency Quantiles `json:"sched_latency"`
	// GCPause is the stop-the-world pauses of the interval
	// (/sched/pauses/total/gc:seconds) and OtherPause the others.
	GCPause    Quantiles `json:"gc_pause"`
	OtherPause Quantiles `json:"other_pause"`
	// GCCPU is the CPU time the GC took (/cpu/classes/gc/total) and CPU the
	// process's CPU time (getrusage), both in the interval.
	GCCPU time.Duration `json:"gc_cpu_ns"`
	CPU   time.Duration `json:"cpu_ns"`

	// Kernel is the run delay and on-CPU time of the process's threads in
	// the interval (/proc/self/task/*/schedstat); KernelErr says why not.
	Kernel    Threads `json:"kernel"`
	KernelErr string  `json:"kernel_error,omitempty"`

	// Budget is the CPU budget at the end of the interval and Throttling
	// the cpu.stat delta of the cgroup that sets it (zero without a quota).
	Budget     budget.Budget `json:"budget"`
	Throttling budget.Stat   `json:"throttling"`
	Pressure   Pressure      `json:"pressure"`

	// TimerLateness is how late the canary's sleeps woke (Options.TimerCanary).
	TimerLateness Quantiles `json:"timer_lateness"`
}

// Quantiles summarises the events of one interval.
type Quantiles struct {
	Count uint64        `json:"count"`
	P50   time.Duration `json:"p50_ns"`
	P99   time.Duration `json:"p99_ns"`
	Max   time.Duration `json:"max_ns"` // upper bound of the highest bucket with an event
	Sum   time.Duration `json:"sum_ns"` // estimated from bucket midpoints
}

// Sampler samples the calling process every interval.
type Sampler struct {
	o      Options
	mu     sync.Mutex
	last   Sample
	prev   state
	cancel context.CancelFunc
	done   chan struct{}
	canary *canary
}

// state is the cumulative counters a sample is the delta of.
type state struct {
	at         time.Time
	metrics    []metrics.Sample
	cpu        time.Duration
	threads    Threads
	threadsErr error
	stat       budget.Stat
	statDir    string
}

var metricNames = []string{
	"/sched/gomaxprocs:threads",
	"/sched/goroutines:goroutines",
	"/sched/goroutines/runnable:goroutines",
	"/sched/goroutines/running:goroutines",
	"/sched/goroutines/waiting:goroutines",
	"/sched/goroutines/not-in-go:goroutines",
	"/sched/threads/total:threads",
	"/sched/latencies:seconds",
	"/sched/pauses/total/gc:seconds",
	"/sched/pauses/total/other:seconds",
	"/cpu/classes/gc/total:cpu-seconds",
}

// Start starts a sampler; the first sample is ready one interval later.
// Close stops it.
func Start(o Options) (*Sampler, error) {
	if o.Interval == 0 {
		o.Interval = time.Second
	}
	if o.Interval < 10*time.Millisecond {
		return nil, errInterval(o.Interval)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Sampler{o: o, cancel: cancel, done: make(chan struct{})}
	if o.CanaryPeriod == 0 {
		o.CanaryPeriod = 50 * time.Millisecond
	}
	if o.CanaryPeriod < 100*time.Microsecond {
		cancel()
		return nil, fmt.Errorf("schedstat: Options.CanaryPeriod %v is below 100µs", o.CanaryPeriod)
	}
	s.o = o
	if o.TimerCanary {
		s.canary = startCanary(ctx, o.CanaryPeriod)
	}
	s.prev = read()
	go s.run(ctx)
	return s, nil
}

type errInterval time.Duration

func (e errInterval) Error() string {
	return "schedstat: Options.Interval " + time.Duration(e).String() + " is below 10ms"
}

func (s *Sampler) run(ctx context.Context) {
	defer close(s.done)
	t := time.NewTicker(s.o.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if time.Since(s.prev.at) < s.o.Interval/2 {
			// A tick that waited while this goroutine was starved, then a
			// second one at once: a sample of a few µs would say nothing.
			continue
		}
		cur := read()
		smp := delta(s.prev, cur)
		if s.canary != nil {
			smp.TimerLateness = s.canary.take()
		}
		s.mu.Lock()
		s.last, s.prev = smp, cur
		s.mu.Unlock()
	}
}

// Last returns the most recent sample (the zero Sample before the first).
func (s *Sampler) Last() Sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// Close stops the sampler and its canary and waits for them.
func (s *Sampler) Close() {
	s.cancel()
	<-s.done
	if s.canary != nil {
		<-s.canary.done
	}
}

func read() state {
	st := state{at: time.Now(), metrics: make([]metrics.Sample, len(metricNames))}
	for i, n := range metricNames {
		st.metrics[i].Name = n
	}
	metrics.Read(st.metrics)
	st.cpu, _ = cputime.Process()
	st.threads, st.threadsErr = ReadThreads(0)
	return st
}

func delta(prev, cur state) Sample {
	s := Sample{Time: cur.at, Interval: cur.at.Sub(prev.at)}
	for i, m := range cur.metrics {
		v := m.Value
		switch m.Name {
		case "/sched/gomaxprocs:threads":
			s.GOMAXPROCS = int(u64(v))
		case "/sched/goroutines:goroutines":
			s.Goroutines = int64(u64(v))
		case "/sched/goroutines/runnable:goroutines":
			s.Runnable, s.GoroutineStates = int64(u64(v)), v.Kind() == metrics.KindUint64
		case "/sched/goroutines/running:goroutines":
			s.Running = int64(u64(v))
		case "/sched/goroutines/waiting:goroutines":
			s.Waiting = int64(u64(v))
		case "/sched/goroutines/not-in-go:goroutines":
			s.NotInGo = int64(u64(v))
		case "/sched/threads/total:threads":
			s.Threads = int64(u64(v))
		case "/sched/latencies:seconds":
			s.SchedLatency = histDelta(prev.metrics[i].Value, v)
		case "/sched/pauses/total/gc:seconds":
			s.GCPause = histDelta(prev.metrics[i].Value, v)
		case "/sched/pauses/total/other:seconds":
			s.OtherPause = histDelta(prev.metrics[i].Value, v)
		case "/cpu/classes/gc/total:cpu-seconds":
			if v.Kind() == metrics.KindFloat64 && prev.metrics[i].Value.Kind() == metrics.KindFloat64 {
				s.GCCPU = time.Duration((v.Float64() - prev.metrics[i].Value.Float64()) * 1e9)
			}
		}
	}
	s.CPU = cur.cpu - prev.cpu
	if cur.threads.PerThread != nil {
		s.Kernel = cur.threads.Sub(prev.threads)
		if s.Threads == 0 {
			s.Threads = int64(cur.threads.Count)
		}
	} else if cur.threadsErr != nil {
		s.KernelErr = cur.threadsErr.Error()
	}
	if b, err := budget.Detect(); err == nil {
		s.Budget = b
		if l, ok := b.Limiting(); ok {
			if st, err := budget.ReadStatDir(l.Dir); err == nil {
				s.Throttling = st
			}
			s.Pressure = ReadPressure(filepath.Join(l.Dir, "cpu.pressure"))
		} else if b.CgroupDir != "" {
			s.Pressure = ReadPressure(filepath.Join(b.CgroupDir, "cpu.pressure"))
		}
	}
	if s.GOMAXPROCS == 0 {
		s.GOMAXPROCS = runtime.GOMAXPROCS(0)
	}
	return s
}

func u64(v metrics.Value) uint64 {
	if v.Kind() == metrics.KindUint64 {
		return v.Uint64()
	}
	return 0
}

// histDelta summarises the events recorded between two readings of a
// runtime/metrics histogram.
func histDelta(prev, cur metrics.Value) Quantiles {
	if cur.Kind() != metrics.KindFloat64Histogram {
		return Quantiles{}
	}
	h := cur.Float64Histogram()
	counts := make([]uint64, len(h.Counts))
	copy(counts, h.Counts)
	if prev.Kind() == metrics.KindFloat64Histogram {
		for i, c := range prev.Float64Histogram().Counts {
			if i < len(counts) && counts[i] >= c {
				counts[i] -= c
			}
		}
	}
	return quantiles(h.Buckets, counts)
}

// quantiles reads p50, p99 and max of counts over bucket boundaries
// (len(buckets) == len(counts)+1; seconds), each as the upper bound of
// the bucket that holds it, so never under-reported.
func quantiles(buckets []float64, counts []uint64) Quantiles {
	var q Quantiles
	for i, c := range counts {
		q.Count += c
		if c > 0 {
			lo, hi := buckets[i], buckets[i+1]
			if math.IsInf(lo, -1) {
				lo = 0
			}
			if math.IsInf(hi, 1) {
				hi = lo
			}
			q.Sum += time.Duration(float64(c) * (lo + hi) / 2 * 1e9)
		}
	}
	if q.Count == 0 {
		return q
	}
	at := func(p float64) time.Duration {
		want := uint64(math.Ceil(p * float64(q.Count)))
		var n uint64
		for i, c := range counts {
			n += c
			if n >= want {
				hi := buckets[i+1]
				if math.IsInf(hi, 1) {
					hi = buckets[i]
				}
				return time.Duration(hi * 1e9)
			}
		}
		return 0
	}
	q.P50, q.P99, q.Max = at(0.5), at(0.99), at(1)
	return q
}

// canary measures timer lateness: a goroutine sleeping a period in a loop.
type canary struct {
	mu     sync.Mutex
	counts []uint64 // by bucket of canaryBuckets; guarded by mu
	due    int64    // unix ns the current sleep should end; guarded by mu
	done   chan struct{}
	// between, when set (tests), runs in a wake-up between its record and
	// the next sleep's due time.
	between func()
}

// recordLocked counts a wake-up late seconds late; c.mu is held.
func (c *canary) recordLocked(late float64) {
	i := 0
	for i < len(canaryBuckets)-2 && late >= canaryBuckets[i+1] {
		i++
	}
	c.counts[i]++
}

// canaryBuckets are 1-2-5 steps from 10 µs to 10 s, in seconds.
var canaryBuckets = func() []float64 {
	b := []float64{0}
	for d := 1e-5; d < 10; d *= 10 {
		b = append(b, d, 2*d, 5*d)
	}
	return append(b, 10, math.Inf(1))
}()

// newCanary arms the first sleep's due time before any goroutine exists:
// on Ps busy with many runnable goroutines a new goroutine can wait a whole
// sampling interval before it first runs, and a canary that has not run is
// the worst case of lateness, not an empty one.
func newCanary(period time.Duration) *canary {
	return &canary{counts: make([]uint64, len(canaryBuckets)-1), done: make(chan struct{}),
		due: time.Now().Add(period).UnixNano()}
}

func startCanary(ctx context.Context, period time.Duration) *canary {
	c := newCanary(period)
	go c.run(ctx, period)
	return c
}

func (c *canary) run(ctx context.Context, period time.Duration) {
	defer close(c.done)
	c.mu.Lock()
	want := time.Unix(0, c.due)
	c.mu.Unlock()
	t := time.NewTimer(time.Until(want))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		want = c.woke(want, period)
		t.Reset(period)
	}
}

// woke records a wake-up from the sleep due at want and arms the next,
// due a period from now, in one step under c.mu: a take between the two
// would see the wake-up neither recorded nor overdue, and an interval in
// which a starved canary woke once would report no lateness at all.
func (c *canary) woke(want time.Time, period time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	c.recordLocked(now.Sub(want).Seconds())
	if c.between != nil {
		c.between()
	}
	next := now.Add(period)
	c.due = next.UnixNano()
	return next
}

// take returns the lateness recorded since the last take. A sleep that is
// overdue now counts with its lateness so far: a canary that cannot wake at
// all in an interval is the worst case, not an empty one.
func (c *canary) take() Quantiles {
	c.mu.Lock()
	if late := time.Since(time.Unix(0, c.due)); late > 0 {
		c.recordLocked(late.Seconds())
	}
	counts := c.counts
	c.counts = make([]uint64, len(counts))
	c.mu.Unlock()
	return quantiles(canaryBuckets, counts)
}
