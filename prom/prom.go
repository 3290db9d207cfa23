// Package prom exports a cpuwork.Executor and the process's scheduling
// signals as Prometheus metrics: the signals a fleet autoscales on (queue
// wait of each class, saturation, shedding) and the ones that explain lost
// latency (throttling of the cgroup that sets the quota, kernel run delay,
// the Go runtime's scheduling latency at sub-millisecond resolution).
//
// It is a module of its own (github.com/cpuwork/cpuwork/prom) so that the
// cpuwork library never depends on client_golang.
//
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(prom.NewCollector(exec, prom.Options{}))
//
// Histograms are classic histograms with buckets at 1-2-5 steps from 10 µs
// to 10 s (DefaultBuckets), re-bucketed from cpuwork's own log-linear
// histograms and from runtime/metrics; the client_golang Go collector
// re-buckets scheduling latency to powers of ten, too coarse for a 1 ms
// p99. Each bucket's count is the count of observations at most the
// largest source bound not above it, so a quantile read from these buckets
// is never below the true one by more than one source bucket.
package prom

import (
	"math"
	"runtime/metrics"
	"sync"
	"unicode/utf8"

	"github.com/cpuwork/cpuwork"
	"github.com/cpuwork/cpuwork/account"
	"github.com/cpuwork/cpuwork/budget"
	"github.com/cpuwork/cpuwork/schedstat"
	"github.com/prometheus/client_golang/prometheus"
)

// DefaultBuckets are upper bounds in seconds: 1-2-5 steps from 10 µs to 10 s.
var DefaultBuckets = func() []float64 {
	var b []float64
	for d := 1e-5; d < 10; d *= 10 {
		b = append(b, d, 2*d, 5*d)
	}
	return append(b, 10)
}()

// Options configures a Collector. The zero value exports everything with
// DefaultBuckets.
type Options struct {
	// Buckets replaces DefaultBuckets (seconds, increasing).
	Buckets []float64
	// NoProcess leaves out the process-wide metrics (budget, throttling,
	// run delay, runtime scheduling latency), for a second executor in the
	// same process.
	NoProcess bool
	// ConstLabels are added to every metric (for example the executor's
	// name when a process has several).
	ConstLabels prometheus.Labels
}

// Collector is a prometheus.Collector for an executor. Collect costs a
// few microseconds for the executor plus, unless Options.NoProcess, a
// budget read, a cpu.stat read and one small read per thread.
type Collector struct {
	e       *cpuwork.Executor
	o       Options
	descs   map[string]*prometheus.Desc
	mu      sync.Mutex
	delay   schedstat.Threads // last per-thread reading
	delayNs float64           // run delay summed over readings, so it never falls when threads exit
}

// NewCollector returns a collector for e (nil e: process metrics only).
func NewCollector(e *cpuwork.Executor, o Options) *Collector {
	if len(o.Buckets) == 0 {
		o.Buckets = DefaultBuckets
	}
	c := &Collector{e: e, o: o, descs: map[string]*prometheus.Desc{}}
	d := func(name, help string, labels ...string) {
		c.descs[name] = prometheus.NewDesc(name, help, labels, o.ConstLabels)
	}
	d("cpuwork_queue_wait_seconds", "Time from submission to getting a slot, per class.", "class")
	d("cpuwork_slot_seconds", "Time a task held its slot (service time), per class.", "class")
	d("cpuwork_task_latency_seconds", "Where accounted tasks' latency went (cpuwork.Options.Account: a sample of tasks), per class and part: queue_wait, on_cpu, kernel_run_queue, throttled, go_run_queue, gc, other; a task's parts sum to its latency from arrival.", "class", "part")
	d("cpuwork_tasks_total", "Tasks by class and outcome: admitted, completed, rejected (ErrSaturated or ErrClosed; includes shed), shed, canceled, panicked, admitted_late (let through though expected to miss a latency objective: the late budget; in admitted once they run), ended_late (queued with a latency target and finished past it: the executor's part of late answers; in completed).", "class", "outcome")
	d("cpuwork_queued", "Tasks waiting for a slot, per class.", "class")
	d("cpuwork_running", "Tasks holding a slot, per class.", "class")
	d("cpuwork_slots", "Tasks the executor runs at once (its slot count).")
	d("cpuwork_budget_cores", "The process's CPU budget in cores: the tightest of the affinity mask and every cgroup quota of the leaf and its ancestors.")
	d("cpuwork_cgroup_throttled_periods_total", "CFS periods in which the cgroup that sets the quota was throttled (cpu.stat nr_throttled).")
	d("cpuwork_cgroup_periods_total", "CFS enforcement periods of the cgroup that sets the quota (cpu.stat nr_periods).")
	d("cpuwork_cgroup_throttled_seconds_total", "Time the cgroup that sets the quota was throttled (cpu.stat throttled_time or throttled_usec).")
	d("cpuwork_os_run_delay_seconds_total", "Time the process's threads were runnable but waiting for a CPU (/proc/self/task/*/schedstat field 2).")
	d("cpuwork_netwatch_polls_total", "Polls of the connections watched through cpuwork.WatchListener, made by Checkpoint while every P was busy (at most one per 200 µs).")
	d("cpuwork_netwatch_wakes_total", "Polls that found a request arrived and parked a task so its P polled the network at once (instead of sysmon's 10 ms poll).")
	d("cpuwork_netwatch_descriptors_total", "Listeners and connections WatchListener registered (watched=true) or could not (watched=false).", "watched")
	d("cpuwork_pacing_target_ratio", "The fractional slot's pacer (cpuwork.Stats.Pacing, only under a fractional CPU quota): the share of the quota it lets the cgroup use (0.5 to 0.97).")
	d("cpuwork_pacing_closed_seconds_total", "Time the fractional quota's extra slot was closed by its pacer.")
	d("cpuwork_pacing_slots_held", "Slots held on average while a task queued, over about the last CFS period (cpuwork.Stats.Pacing.Occupancy): what the door divides the queued work by; near ceil(quota) when tasks cannot give the extra slot back.")
	d("cpuwork_pacing_throttled_periods_total", "Throttled CFS periods the pacer saw: effect=lowered lowered its target, effect=held left it (not the extra slot's doing).", "effect")
	d("cpuwork_pacing_unpaceable", "1 once the fractional quota's pacer could not keep the cgroup under its quota (a quarter of a window of CFS periods throttled by tasks that cannot give the paced slot back; cpuwork.Stats.Pacing.Warning says what to set); else 0.")
	d("cpuwork_slots_below_budget", "1 while GOMAXPROCS caps the executor's slots below the CPU budget and its tasks run Go code, so part of the budget goes unused (cpuwork.Stats.Warning says what to set); else 0.")
	d("cpuwork_key_slot_seconds_total", "Slot time of the tasks that queued, per key (cpuwork.WithKey), for the keys with the most slot time (cpuwork.Stats.Keys: at most 10; a key leaves the set when others pass it).", "class", "key")
	d("cpuwork_key_refused_total", "Tasks refused (ErrSaturated), per key, for the keys of cpuwork.Stats.Keys.", "class", "key")
	d("cpuwork_key_lead_seconds", "How far past its share of its class a key is now (its tasks queue behind other keys' arriving up to this much later; at most 10 s), for the keys of cpuwork.Stats.Keys.", "class", "key")
	d("cpuwork_go_sched_latency_seconds", "Time goroutines spent runnable before running (runtime/metrics /sched/latencies:seconds), at DefaultBuckets resolution.")
	return c
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	if c.e != nil {
		c.collectExecutor(ch)
	}
	if !c.o.NoProcess {
		c.collectProcess(ch)
	}
}

func (c *Collector) collectExecutor(ch chan<- prometheus.Metric) {
	st := c.e.Stats()
	nw := st.NetWatch
	ch <- prometheus.MustNewConstMetric(c.descs["cpuwork_netwatch_polls_total"], prometheus.CounterValue, float64(nw.Polls))
	ch <- prometheus.MustNewConstMetric(c.descs["cpuwork_netwatch_wakes_total"], prometheus.CounterValue, float64(nw.Wakes))
	ch <- prometheus.MustNewConstMetric(c.descs["cpuwork_netwatch_descriptors_total"], prometheus.CounterValue, float64(nw.Watched), "true")
	ch <- prometheus.MustNewConstMetric(c.descs["cpuwork_netwatch_descriptors_total"], prometheus.CounterValue, float64(nw.Unwatched), "false")
	ch <- prometheus.MustNewConstMetric(c.descs["cpuwork_slots"], prometheus.GaugeValue, float64(st.Slots))
	below := 0.0
	if st.Warning != "" {
		below = 1
	}
	ch <- prometheus.MustNewConstMetric(c.descs["cpuwork_slots_below_budget"], prometheus.GaugeValue, below)
	unpaceable := 0.0
	if st.Pacing.Warning != "" {
		unpaceable = 1
	}
	ch <- prometheus.MustNewConstMetric(c.descs["cpuwork_pacing_unpaceable"], prometheus.GaugeValue, unpaceable)
	if p := st.Pacing; p.Paced {
		ch <- prometheus.MustNewConstMetric(c.descs["cpuwork_pacing_target_ratio"], prometheus.GaugeValue, p.Target)
		ch <- prometheus.MustNewConstMetric(c.descs["cpuwork_pacing_closed_seconds_total"], prometheus.CounterValue, p.Closed.Seconds())
		ch <- prometheus.MustNewConstMetric(c.descs["cpuwork_pacing_slots_held"], prometheus.GaugeValue, p.Occupancy)
		ch <- prometheus.MustNewConstMetric(c.descs["cpuwork_pacing_throttled_periods_total"], prometheus.CounterValue, float64(p.Lowered), "lowered")
		ch <- prometheus.MustNewConstMetric(c.descs["cpuwork_pacing_throttled_periods_total"], prometheus.CounterValue, float64(p.Held), "held")
	}
	seen := make(map[[2]string]bool, len(st.Keys))
	for _, k := range st.Keys {
		class := k.Class.String()
		if seen[[2]string{class, k.Key}] || !utf8.ValidString(k.Key) {
			// A key's name is a client's string: one that repeats another
			// (a made-up key naming a cut one's prefix and digest) would
			// fail the scrape, one that is not UTF-8 would panic here.
			continue
		}
		seen[[2]string{class, k.Key}] = true
		ch <- prometheus.MustNewConstMetric(c.descs["cpuwork_key_slot_seconds_total"], prometheus.CounterValue, k.SlotTime.Seconds(), class, k.Key)
		ch <- prometheus.MustNewConstMetric(c.descs["cpuwork_key_refused_total"], prometheus.CounterValue, float64(k.Refused), class, k.Key)
		ch <- prometheus.MustNewConstMetric(c.descs["cpuwork_key_lead_seconds"], prometheus.GaugeValue, k.Lead.Seconds(), class, k.Key)
	}
	for _, s := range st.Classes {
		name := s.Class.String()
		for outcome, v := range map[string]uint64{"admitted": s.Admitted, "completed": s.Completed, "rejected": s.Rejected,
			"shed": s.Shed, "canceled": s.Canceled, "panicked": s.Panicked, "admitted_late": s.AdmittedLate, "ended_late": s.EndedLate} {
			ch <- prometheus.MustNewConstMetric(c.descs["cpuwork_tasks_total"], prometheus.CounterValue, float64(v), name, outcome)
		}
		ch <- prometheus.MustNewConstMetric(c.descs["cpuwork_queued"], prometheus.GaugeValue, float64(s.Queued), name)
		ch <- prometheus.MustNewConstMetric(c.descs["cpuwork_running"], prometheus.GaugeValue, float64(s.Running), name)
		ch <- c.histogram("cpuwork_queue_wait_seconds", s.QueueWait, name)
		ch <- c.histogram("cpuwork_slot_seconds", s.SlotTime, name)
		if s.Accounted == 0 {
			continue
		}
		for p := range account.Part(account.NumParts) {
			ch <- c.histogram("cpuwork_task_latency_seconds", s.Parts[p], name, p.String())
		}
	}
}

// histogram re-buckets a cumulative cpuwork histogram to the collector's
// buckets.
func (c *Collector) histogram(name string, h cpuwork.Histogram, labels ...string) prometheus.Metric {
	return prometheus.MustNewConstHistogram(c.descs[name], h.Count, h.SumSeconds, rebucket(h.UpperSeconds, h.Cumulative, c.o.Buckets), labels...)
}

// rebucket maps cumulative counts at source bounds to cumulative counts at
// the target bounds: for each target bound, the count at the largest source
// bound not above it.
func rebucket(srcUpper []float64, srcCum []uint64, target []float64) map[float64]uint64 {
	out := make(map[float64]uint64, len(target))
	i := 0
	var cum uint64
	for _, b := range target {
		for i < len(srcUpper) && srcUpper[i] <= b*(1+1e-9) {
			cum = srcCum[i]
			i++
		}
		out[b] = cum
	}
	return out
}

func (c *Collector) collectProcess(ch chan<- prometheus.Metric) {
	if b, err := budget.Detect(); err == nil {
		ch <- prometheus.MustNewConstMetric(c.descs["cpuwork_budget_cores"], prometheus.GaugeValue, b.Cores)
		if l, ok := b.Limiting(); ok {
			if st, err := budget.ReadStatDir(l.Dir); err == nil {
				ch <- prometheus.MustNewConstMetric(c.descs["cpuwork_cgroup_periods_total"], prometheus.CounterValue, float64(st.Periods))
				ch <- prometheus.MustNewConstMetric(c.descs["cpuwork_cgroup_throttled_periods_total"], prometheus.CounterValue, float64(st.ThrottledPeriods))
				ch <- prometheus.MustNewConstMetric(c.descs["cpuwork_cgroup_throttled_seconds_total"], prometheus.CounterValue, st.ThrottledTime.Seconds())
			}
		}
	}
	if t, err := schedstat.ReadThreads(0); err == nil {
		c.mu.Lock()
		if c.delay.PerThread != nil {
			c.delayNs += float64(t.Sub(c.delay).RunDelay)
		} else {
			c.delayNs = float64(t.RunDelay)
		}
		c.delay = t
		v := c.delayNs / 1e9
		c.mu.Unlock()
		ch <- prometheus.MustNewConstMetric(c.descs["cpuwork_os_run_delay_seconds_total"], prometheus.CounterValue, v)
	}
	s := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() == metrics.KindFloat64Histogram {
		h := s[0].Value.Float64Histogram()
		upper := make([]float64, len(h.Counts))
		cum := make([]uint64, len(h.Counts))
		var n uint64
		var sum float64
		for i, k := range h.Counts {
			n += k
			upper[i], cum[i] = h.Buckets[i+1], n
			lo, hi := h.Buckets[i], h.Buckets[i+1]
			if math.IsInf(lo, -1) {
				lo = 0
			}
			if math.IsInf(hi, 1) {
				hi = lo
			}
			sum += float64(k) * (lo + hi) / 2
		}
		ch <- prometheus.MustNewConstHistogram(c.descs["cpuwork_go_sched_latency_seconds"], n, sum, rebucket(upper, cum, c.o.Buckets))
	}
}
