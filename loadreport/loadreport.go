// Package loadreport reports an executor's load in the shape load
// balancers read: the fields of an ORCA load report (xds.data.orca.v3.
// OrcaLoadReport), which gRPC's weighted_round_robin policy reads from
// each response's trailer or an out-of-band stream, and Envoy reads from
// the endpoint-load-metrics response header. cpuworkgrpc and cpuworkhttp
// send it when their ReportLoad option is set; a server with its own
// transport can send Report's fields itself.
//
// A balancer by load weighs each backend by the requests it serves per
// unit of utilization (gRPC's weighted_round_robin: rps / (utilization +
// eps/rps · penalty)), so utilization must grow with what the backend can
// no longer serve, not only with the CPU it burns: Utilization is the
// share of the executor's slots held over the last second plus the queue
// it holds, in objectives of waiting. It is 1.0 when every slot is busy
// and nothing waits — the most the backend serves within its objective —
// and passes 1 by one for each objective's worth of work queued.
package loadreport

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cpuwork/cpuwork"
	"github.com/cpuwork/cpuwork/budget"
)

// HeaderName is the HTTP response header Envoy reads a backend's load
// report from.
const HeaderName = "endpoint-load-metrics"

// Report is an executor's load over about the last second, in ORCA's
// load report fields.
type Report struct {
	// Utilization is ORCA's application_utilization: the share of slot
	// time the executor's slots were held over the window (0 to 1), plus
	// the work queued now in units of the objective: queued tasks times
	// their mean slot time, divided by the slots and the objective (0
	// without an objective). 1.0: every slot busy, nothing waiting.
	Utilization float64
	// CPUUtilization is ORCA's cpu_utilization: the process's CPU time
	// over the window divided by its CPU budget (budget.Budget.Cores,
	// every cgroup quota up the tree and the affinity); 0 where the
	// platform gives no process CPU time.
	CPUUtilization float64
	// RPS is ORCA's rps_fractional: tasks completed per second over the
	// window, every class.
	RPS float64
	// EPS is ORCA's eps: tasks refused per second (ErrSaturated or
	// ErrClosed), every class.
	EPS float64
}

// Header is r in Envoy's text format for HeaderName ("TEXT
// application_utilization=0.52, cpu_utilization=0.48,
// rps_fractional=120.5, eps=0").
func (r Report) Header() string {
	b := make([]byte, 0, 112)
	b = append(b, "TEXT application_utilization="...)
	b = strconv.AppendFloat(b, r.Utilization, 'g', 4, 64)
	b = append(b, ", cpu_utilization="...)
	b = strconv.AppendFloat(b, r.CPUUtilization, 'g', 4, 64)
	b = append(b, ", rps_fractional="...)
	b = strconv.AppendFloat(b, r.RPS, 'g', 6, 64)
	b = append(b, ", eps="...)
	b = strconv.AppendFloat(b, r.EPS, 'g', 6, 64)
	return string(b)
}

// The window: a sample of the executor's counters every sampleEvery,
// taken by the first Report call after it is due; a report compares the
// newest sample with the newest one at least window older (or the oldest
// kept), over at most ringSize-1 intervals.
const (
	sampleEvery = 250 * time.Millisecond
	window      = time.Second
	ringSize    = 9  // two windows of samples
	budgetEvery = 10 // samples between two reads of the CPU budget
)

// Reporter computes an executor's Report. Its methods are safe for
// concurrent use; Report costs an atomic load between samples and an
// Executor.Stats call at most every 250 ms.
type Reporter struct {
	e         *cpuwork.Executor
	objective time.Duration
	start     time.Time

	mu      sync.Mutex // held by the one caller taking a sample
	ring    [ringSize]sample
	n       int // samples taken
	cores   float64
	mean    float64 // the last known mean slot time, seconds
	next    atomic.Int64
	current atomic.Pointer[Report]
}

type sample struct {
	at                  time.Duration // since start
	completed, refused  uint64
	slotSeconds, cpuSec float64
	slots, queued       int
}

// New returns a Reporter of e's load, with the queue measured against
// objective (the requests' latency objective; 0: the queue is not
// counted). It panics if e is nil (a programming error).
func New(e *cpuwork.Executor, objective time.Duration) *Reporter {
	if e == nil {
		panic("loadreport: New with a nil executor")
	}
	return &Reporter{e: e, objective: max(objective, 0), start: time.Now()}
}

// Report returns the executor's load over about the last second: zero
// until two samples a quarter second apart exist. When a sample is due
// it is taken on a goroutine of its own (Executor.Stats and, every few
// seconds, the CPU budget's cgroup files), never on the caller's time:
// the caller gets the report before it.
func (r *Reporter) Report() Report {
	now := time.Since(r.start)
	if int64(now) >= r.next.Load() && r.mu.TryLock() {
		r.next.Store(int64(now + sampleEvery))
		go func() {
			defer r.mu.Unlock()
			r.sampleLocked(time.Since(r.start))
		}()
	}
	if p := r.current.Load(); p != nil {
		return *p
	}
	return Report{}
}

// sampleLocked takes a sample at now and computes the report from it.
func (r *Reporter) sampleLocked(now time.Duration) {
	st := r.e.Stats()
	s := sample{at: now, slots: st.Slots}
	for _, c := range st.Classes {
		s.completed += c.Completed
		s.refused += c.Rejected
		s.slotSeconds += c.SlotSeconds
		s.queued += c.Queued
	}
	s.cpuSec, _ = processCPU()
	if r.n%budgetEvery == 0 {
		if b, err := budget.Detect(); err == nil && b.Cores > 0 {
			r.cores = b.Cores
		}
	}
	r.ring[r.n%ringSize] = s
	r.n++
	if r.n < 2 {
		return
	}
	base := r.ring[(r.n-2)%ringSize] // the newest before s
	for i := 2; i <= min(r.n, ringSize); i++ {
		base = r.ring[(r.n-i)%ringSize]
		if now-base.at >= window {
			break
		}
	}
	rep := compute(base, s, r.objective, r.cores, &r.mean)
	r.current.Store(&rep)
}

// compute is the report from sample a to sample b. mean is the last known
// mean slot time, updated when tasks completed between a and b.
func compute(a, b sample, objective time.Duration, cores float64, mean *float64) Report {
	dt := (b.at - a.at).Seconds()
	if dt <= 0 {
		return Report{}
	}
	var rep Report
	done := b.completed - min(a.completed, b.completed)
	used := max(b.slotSeconds-a.slotSeconds, 0)
	rep.RPS = float64(done) / dt
	rep.EPS = float64(b.refused-min(a.refused, b.refused)) / dt
	if done > 0 {
		*mean = used / float64(done)
	}
	if b.slots > 0 {
		rep.Utilization = min(used/(dt*float64(b.slots)), 1)
		if objective > 0 {
			rep.Utilization += float64(b.queued) * *mean / (float64(b.slots) * objective.Seconds())
		}
	}
	if cores > 0 && b.cpuSec > a.cpuSec {
		rep.CPUUtilization = (b.cpuSec - a.cpuSec) / (dt * cores)
	}
	return rep
}
