// Package sim replays a workload — open-loop arrivals from a trace and
// closed-loop clients — on a virtual clock through an admission policy:
// cpuwork's own admission code (internal/admission's Granter: the door,
// the ordering, the class shares, shedding and the late budget, driven
// through the protocol the executor uses) or a policy teams use instead
// (a goroutine per request, a FIFO worker pool, a semaphore, a bounded
// pool answering 503, the peers modelled on failsafe-go, concurrency-limits
// and per-class semaphores, and a clairvoyant limit). Each task holds one
// slot for its CPU time; the slots are the cores; under cpuwork a closed
// loop's task hands its slot over at a Checkpoint when more urgent work
// waits. Nothing else is modelled: no netpoll, no throttling or pacing of
// a fractional quota, no garbage collector, no run queue shared with
// other threads — those stay questions for the real-machine bench. The
// same workload through the same policy gives the same result on any
// machine.
package sim

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/cpuwork/cpuwork/internal/admission"
	"github.com/cpuwork/cpuwork/internal/pacer"
)

// Class is a request's priority class (critical, interactive, batch,
// background), as cpuwork's.
type Class = admission.Class

// Request is one open-loop arrival.
type Request struct {
	At       time.Duration // arrival, from the workload's start
	Class    Class
	CPU      time.Duration // slot time it takes once running (> 0)
	Deadline time.Duration // the client gives up this long after arrival; 0: never
	Kind     string        // a label the report groups by ("" : the class's name)
	// Key is the request's key under cpuwork (WithKey: a tenant, a
	// client); "": none. The other policies ignore it.
	Key string
}

// Loop is a closed-loop source: Clients clients, each submitting a task
// of CPU when its last one ends (or is refused), from the start until
// the workload's Duration — batch work that saturates whatever it is
// given.
type Loop struct {
	Class   Class
	CPU     time.Duration
	Clients int
	Kind    string
	// Checkpoint is how often a task calls cpuwork.Checkpoint, in CPU
	// time (0: never): under cpuwork it hands its slot over there when
	// more urgent work waits. The other policies run it through.
	Checkpoint time.Duration
}

// Workload is what a simulation replays.
type Workload struct {
	Name     string
	Slots    int           // the cores; every policy runs this many tasks at once
	Duration time.Duration // arrivals and loops stop here; queued work still ends
	Requests []Request     // sorted by At
	Loops    []Loop
	// Objective is each class's latency objective (0: none): a request
	// served within it counts in the goodput, and cpuwork's requests
	// carry it as their target (WithTarget's Latency) when Targets is set.
	Objective [admission.NumClasses]time.Duration
	Targets   bool
	// Declared gives cpuwork each request's CPU time as its expected
	// run time (WithTarget's Service), as a service that knows its
	// request sizes does.
	Declared bool
	// HideDeadline keeps each request's Deadline out of what cpuwork
	// sees: the client still gives up then (the request is withdrawn, as
	// a server's request context is canceled when its client hangs up),
	// but no ctx deadline tells the door in advance, as with the HTTP and
	// gRPC middleware, whose objective is a target.
	HideDeadline bool
	// Quota is a CFS quota in cores (0: none) over Period (0: 100 ms):
	// each running request has a CPU of its own, and once the slots
	// have used Quota x Period in a period, every one is frozen until
	// it ends (quota.go).
	Quota  float64
	Period time.Duration
	// Pace runs cpuwork's pacer of the quota's fractional slot as the
	// executor's default does (it paces only where a throttled period's
	// pause would miss the tightest objective queued).
	Pace bool
	// QueueLimit is the bounded pool's queue (pool-503); 0: 64.
	QueueLimit int
	// StepAt is when the offered load steps up (0: no step): the result
	// then gives each class's recovery.
	StepAt time.Duration
	// stepEnd is when a matrix cell's step comes down again (0: never).
	stepEnd time.Duration
}

// MaxSlots is the most slots a workload may have: the executor's bound.
const MaxSlots = 4096

// Validate reports the first thing wrong with w.
func (w *Workload) Validate() error {
	switch {
	case w.Slots < 1 || w.Slots > MaxSlots:
		return fmt.Errorf("slots %d: must be 1 to %d (the executor's bound)", w.Slots, MaxSlots)
	case w.Duration <= 0:
		return errors.New("the workload has no duration")
	case w.Quota < 0 || math.IsNaN(w.Quota) || w.Period < 0:
		return fmt.Errorf("quota %g cores over %v: want a quota of 0 (none) or more over a period of 0 (100 ms) or more", w.Quota, w.Period)
	case len(w.Requests) == 0 && len(w.Loops) == 0:
		return errors.New("the workload has no request and no loop")
	}
	for i, r := range w.Requests {
		if err := checkClass(r.Class); err != nil {
			return fmt.Errorf("request %d: %w", i+1, err)
		}
		if r.CPU <= 0 || r.At < 0 || r.Deadline < 0 {
			return fmt.Errorf("request %d: arrival %v, CPU %v, deadline %v: CPU must be > 0, the others >= 0", i+1, r.At, r.CPU, r.Deadline)
		}
		if i > 0 && r.At < w.Requests[i-1].At {
			return fmt.Errorf("request %d arrives at %v, before request %d (%v): the trace must be sorted by arrival", i+1, r.At, i, w.Requests[i-1].At)
		}
	}
	for i, l := range w.Loops {
		if err := checkClass(l.Class); err != nil {
			return fmt.Errorf("loop %d: %w", i+1, err)
		}
		if l.CPU <= 0 || l.Clients < 1 || l.Checkpoint < 0 {
			return fmt.Errorf("loop %d: CPU %v, %d clients, Checkpoint every %v: the first two must be positive, the last >= 0", i+1, l.CPU, l.Clients, l.Checkpoint)
		}
	}
	return nil
}

func checkClass(c Class) error {
	if c >= admission.NumClasses {
		return fmt.Errorf("class %d: must be critical, interactive, batch or background", c)
	}
	return nil
}

// Policies are the policies Run knows, in report order; a Named one is
// replayed only when asked for by name.
var Policies = []struct {
	Name, What string
	Named      bool
}{
	{"cpuwork", "cpuwork's admission code (its Granter: door, ordering, shares, shedding, late budget) on the slots", false},
	{"goroutines", "a goroutine per request: the slots are Ps, runnable goroutines wait in one run queue, each runs up to a 10 ms time slice and then goes to the back", false},
	{"pool", "worker goroutines, one per slot, fed by a channel in arrival order; a request runs even after its client gave up", false},
	{"semaphore", "a semaphore of one per slot taken in arrival order; a request whose client gave up while it waited leaves (x/sync's Acquire with the request's context)", false},
	{"pool-503", "the pool with a bounded queue (QueueLimit): a request that finds it full is refused at once", false},
	{"goroutines-yield", "goroutines as above whose closed loops call runtime.Gosched at each Checkpoint step (the loop goes to the back of the run queue when another goroutine waits)", true},
	{"sem-deadline", "a semaphore of one per slot whose waiters leave at their class's objective (or their client's deadline, if sooner): x/sync's Acquire with a context ending at arrival plus the objective, answering 503 then", true},
	{"no-queue", "the pool without a queue: a request that finds every slot busy is refused at once (a semaphore's TryAcquire, as cgo servers ship theirs)", true},
	{"pool-q2", "the pool with a queue of 2 per slot, refusing at once when it is full (imgproxy's and the libvips server's shape)", true},
	{"sem-class", "a semaphore per class (a permit per slot for Critical and Interactive, a quarter of the slots for Batch and Background), each with a queue of twice its permits answering 503 when full, waiters leaving at their deadline; the admitted run as goroutines", true},
	{"failsafe-prio", "a model of failsafe-go's adaptive limiter with its queue and prioritizer (rejection from 2 to 3 times the limit, by priority level; waiters leave at their deadline; the limit by Gradient2's rule); the admitted run as goroutines", true},
	{"gradient2", "a model of Netflix concurrency-limits' Gradient2 limit behind its SimpleLimiter (refused at once at the limit; the library's defaults); the admitted run as goroutines", true},
	{"clairvoyant", "the reference, not a peer: knows each request's CPU time, serves by deadline without preemption, admits only what still ends within its objective; closed loops are not run", true},
}

// outcome is how a job ended.
type outcome uint8

const (
	pending outcome = iota
	served
	refused // by the policy: at the door, a full queue, at the head
	expired // its client's deadline passed while it waited
)

// job is one submission.
type job struct {
	Request
	loop    int   // index in Loops, -1: open-loop
	step    int64 // Checkpoint interval under cpuwork, ns (0: none)
	left    int64 // CPU time still to run, ns (cpuwork, goroutines)
	from    int64 // when its current run began (cpuwork, goroutines)
	held    int64 // when its current slot period began (cpuwork)
	arrival int64
	// admitted is when a gate let it in (a limiter's round trip starts
	// there).
	admitted int64
	start    int64
	end      int64
	out      outcome
	queued   bool
	id       int32            // its place in sim.jobs, from 1 (event.j)
	w        admission.Waiter // cpuwork's
}

// Event kinds.
const (
	evArrive = iota
	evDone
	evExpire
	evTick     // a policy's own timer (a time slice's end)
	evThrottle // the quota runs out (quota.go)
	evPeriod   // a CFS period ends (quota.go)
	evPace     // the pacer may step (quota.go)
)

type event struct {
	at   int64
	seq  uint64
	kind uint8
	cpu  bool // marks CPU progress: moves later by a freeze (pushCPU)
	// j is the job's id (job.id), 0: none. An index, not a pointer,
	// keeps the heap free of pointers: the collector neither scans it
	// nor puts a write barrier on each of its swaps.
	j   int32
	gen uint64
}

// events is the replay's event queue, earliest first (ties in the order
// pushed): a binary heap of events by value (container/heap's interface
// would box each event pushed and popped). Its keys (at, seq) are
// unique, so the order events leave in does not depend on the heap's
// shape.
type events []event

func (h events) less(i, k int) bool {
	return h[i].at < h[k].at || h[i].at == h[k].at && h[i].seq < h[k].seq
}

func (h *events) push(e event) {
	*h = append(*h, e)
	q := *h
	for i := len(q) - 1; i > 0; {
		p := (i - 1) / 2
		if !q.less(i, p) {
			break
		}
		q[i], q[p] = q[p], q[i]
		i = p
	}
}

// init restores the heap's order after its keys moved.
func (h events) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

// down moves the event at i down to its place.
func (h events) down(i int) {
	n := len(h)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && h.less(r, l) {
			m = r
		}
		if !h.less(m, i) {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}

// pop removes and returns the earliest event; h must not be empty.
func (h *events) pop() event {
	q := *h
	e := q[0]
	n := len(q) - 1
	q[0] = q[n]
	q = q[:n]
	q.down(0)
	*h = q
	return e
}

// sim is one replay.
type sim struct {
	wl   *Workload
	now  int64
	seq  uint64
	heap events
	jobs []*job
	slab []job // jobs not handed out yet (newJob)
	// slabs are the slabs slab was cut from (recycle).
	slabs []*[jobSlab]job
	q     quotaState
	// pacer is cpuwork's pacer of the quota's fractional slot (Pace).
	pacer *pacer.Pacer
	// work counts the queued events that are not the quota's or the
	// pacer's own (event.clock).
	work int
	pol  policy
	next int // next open-loop request to arrive
	// onServed, when set, is called first when a job is served (a
	// gate's release).
	onServed func(*job)
}

// policy is what a replay drives.
type policy interface {
	arrive(j *job)
	done(j *job)
	expire(j *job)
	tick(gen uint64)
}

// origin is the virtual clock's start: the admission code takes an
// arrival of 0 for "unknown".
const origin = int64(time.Second)

func (s *sim) push(at int64, kind uint8, j *job, gen uint64) {
	s.pushEvent(event{at: at, kind: kind, j: j.ref(), gen: gen})
}

// ref is j's id for an event; 0 for no job.
func (j *job) ref() int32 {
	if j == nil {
		return 0
	}
	return j.id
}

// job is the job an event names (nil: none).
func (s *sim) job(id int32) *job {
	if id == 0 {
		return nil
	}
	return s.jobs[id-1]
}

// pushEvent queues e, numbered in push order.
func (s *sim) pushEvent(e event) {
	s.seq++
	e.seq = s.seq
	if !e.clock() {
		s.work++
	}
	s.heap.push(e)
}

// clock reports whether e is the quota's or the pacer's own (a period,
// a throttle, a pacer's step): those go on only while other events are
// queued (sim.work).
func (e event) clock() bool {
	return e.kind == evThrottle || e.kind == evPeriod || e.kind == evPace
}

// start runs j from now for its CPU time.
func (s *sim) start(j *job) {
	j.start = s.now
	s.onCPU(1)
	s.pushCPU(int64(j.CPU), evDone, j, 0)
}

// waiting marks j queued and arms its client's deadline.
func (s *sim) waiting(j *job) { s.waitingFor(j, j.Deadline) }

// waitingFor marks j queued and has it leave d after its arrival (0:
// never).
func (s *sim) waitingFor(j *job, d time.Duration) {
	j.queued = true
	if d > 0 {
		s.push(j.arrival+int64(d), evExpire, j, 0)
	}
}

// end records how j ended and lets its loop's client submit again.
func (s *sim) end(j *job, o outcome) {
	j.out, j.end = o, s.now
	if o == served && s.onServed != nil {
		s.onServed(j)
	}
	if j.loop < 0 || s.now >= origin+int64(s.wl.Duration) {
		return
	}
	l := s.wl.Loops[j.loop]
	at := s.now
	if o != served {
		// A refused client backs off for one task's time rather than
		// spinning at the same instant.
		at += int64(l.CPU)
	}
	next := s.newJob(Request{At: time.Duration(at - origin), Class: l.Class, CPU: l.CPU, Kind: l.Kind}, j.loop)
	if at > s.now {
		s.push(at, evArrive, next, 0)
		return
	}
	s.pol.arrive(next)
}

// jobSlab is how many jobs newJob allocates at once.
const jobSlab = 256

// slabs keeps the job slabs of replays already read (sim.recycle), so
// that a matrix's thousands of replays do not each allocate theirs.
var slabs sync.Pool

func (s *sim) newJob(r Request, loop int) *job {
	if len(s.slab) == 0 {
		sl, _ := slabs.Get().(*[jobSlab]job)
		if sl == nil {
			sl = new([jobSlab]job)
		}
		s.slabs = append(s.slabs, sl)
		s.slab = sl[:]
	}
	j := &s.slab[0]
	s.slab = s.slab[1:]
	*j = job{Request: r, loop: loop, arrival: origin + int64(r.At), left: int64(r.CPU)}
	if loop >= 0 {
		j.step = int64(s.wl.Loops[loop].Checkpoint)
	}
	s.jobs = append(s.jobs, j)
	j.id = int32(len(s.jobs))
	return j
}

// recycle hands the replay's job slabs on to later replays; s and its
// jobs must not be used after it.
func (s *sim) recycle() {
	for _, sl := range s.slabs {
		slabs.Put(sl)
	}
	s.slabs, s.slab, s.jobs = nil, nil, nil
}

// Run replays wl through the named policy (Policies).
func Run(wl *Workload, policy string) (*Result, error) {
	s, err := replay(wl, policy)
	if err != nil {
		return nil, err
	}
	return s.result(policy), nil
}

// replay replays wl through the named policy and returns the replay,
// every job in it ended.
func replay(wl *Workload, policy string) (*sim, error) {
	if err := wl.Validate(); err != nil {
		return nil, err
	}
	s := &sim{wl: wl, now: origin}
	switch policy {
	case "cpuwork":
		p, err := newGranted(s)
		if err != nil {
			return nil, err
		}
		s.pol = p
	case "goroutines":
		s.pol = newSliced(s)
	case "goroutines-yield":
		p := newSliced(s)
		p.yield = true
		s.pol = p
	case "pool":
		s.pol = &fifo{s: s}
	case "semaphore":
		s.pol = &fifo{s: s, leave: true}
	case "sem-deadline":
		s.pol = &fifo{s: s, leave: true, atObjective: true}
	case "pool-503":
		lim := wl.QueueLimit
		if lim == 0 {
			lim = 64
		}
		s.pol = &fifo{s: s, limit: lim}
	case "no-queue":
		s.pol = &fifo{s: s, limit: -1}
	case "pool-q2":
		s.pol = &fifo{s: s, limit: 2 * wl.Slots}
	case "sem-class":
		s.pol = newGated(s, newSemPerClass(wl.Slots))
	case "gradient2":
		s.pol = newGated(s, newGradient2(func() int64 { return s.now }))
	case "failsafe-prio":
		s.pol = newGated(s, newPrioritized(func() int64 { return s.now }, uint64(len(wl.Requests))))
	case "clairvoyant":
		s.pol = newClairvoyant(s)
	default:
		return nil, fmt.Errorf("no policy %q (known: %s)", policy, policyNames())
	}
	s.jobs = make([]*job, 0, len(wl.Requests))
	for li, l := range wl.Loops {
		for range l.Clients {
			s.push(origin, evArrive, s.newJob(Request{Class: l.Class, CPU: l.CPU, Kind: l.Kind}, li), 0)
		}
	}
	s.arm()
	s.startQuota()
	if p, ok := s.pol.(*granted); ok {
		s.startPacer(&p.g) // cpuwork's pacer, with a quota and Pace
	}
	for len(s.heap) > 0 {
		e := s.heap.pop()
		if !e.clock() {
			s.work--
		}
		s.now = e.at
		j := s.job(e.j)
		switch e.kind {
		case evArrive:
			if j == nil {
				j = s.newJob(wl.Requests[s.next], -1)
				s.next++
				s.arm()
			}
			s.pol.arrive(j)
		case evDone:
			s.pol.done(j)
		case evExpire:
			if j.out == pending && j.start == 0 {
				s.pol.expire(j)
			}
		case evTick:
			s.pol.tick(e.gen)
		case evThrottle:
			s.throttle(e.gen)
		case evPeriod:
			s.newPeriod()
		case evPace:
			s.paceTick()
		}
	}
	return s, nil
}

// arm schedules the next open-loop arrival (one at a time: the heap
// stays as small as the jobs in flight).
func (s *sim) arm() {
	if s.next < len(s.wl.Requests) {
		s.push(origin+int64(s.wl.Requests[s.next].At), evArrive, nil, 0)
	}
}

func policyNames() string {
	var ns []string
	for _, p := range Policies {
		ns = append(ns, p.Name)
	}
	return fmt.Sprint(ns)
}

// Result is one policy's replay of a workload.
type Result struct {
	Policy  string
	Groups  []Group // one per kind of request, in the order first seen
	Classes []Group // one per class, all its kinds together, most urgent first
	// Periods and Throttled count a quota's CFS periods (Workload.Quota)
	// and those the quota ran out in.
	Periods, Throttled int
}

// Group is what one kind of request got.
type Group struct {
	Kind     string
	Class    Class
	Requests int     // submitted within the workload's duration
	Served   int     // ran to the end
	Refused  int     // refused by the policy
	Expired  int     // their client gave up while they waited
	P50, P99 float64 // latency of the served, from arrival, seconds
	Mean     float64 // mean latency of the served, seconds
	// Makespan is the end of the last served request, seconds from the
	// workload's start (a burst's makespan).
	Makespan float64
	P99All   float64 // latency of every request, a refused or expired one counted as never answered (+Inf)
	Within   int     // served within the class's objective; without one, served by the workload's end (Duration)
	// Recovery is, after a step (Workload.StepAt) and for a class with
	// an objective, the time from the step to the end of the last
	// stepWindow (by arrival) whose slowest served request missed the
	// objective: 0 when none did, as the bench reads a step.
	Recovery  time.Duration
	Goodput   float64 // CPU-seconds per second of the Within requests, over Duration
	Objective time.Duration
}

// stepWindow is the width of the windows a step's recovery is read in,
// the bench's.
const stepWindow = 200 * time.Millisecond

// Shed is the share of requests refused or expired.
func (g Group) Shed() float64 {
	if g.Requests == 0 {
		return 0
	}
	return float64(g.Refused+g.Expired) / float64(g.Requests)
}

func (s *sim) result(policy string) *Result {
	var order []string
	groups := map[string]*acc{}
	var classes [admission.NumClasses]*acc
	dur := float64(s.wl.Duration) / 1e9
	for _, j := range s.jobs {
		k := j.Kind
		if k == "" {
			k = j.Class.String()
		}
		a := groups[k]
		if a == nil {
			a = &acc{g: Group{Kind: k, Class: j.Class, Objective: s.wl.Objective[j.Class]}}
			groups[k] = a
			order = append(order, k)
		}
		if classes[j.Class] == nil {
			classes[j.Class] = &acc{g: Group{Kind: j.Class.String(), Class: j.Class, Objective: s.wl.Objective[j.Class]}}
		}
		for _, a := range [2]*acc{a, classes[j.Class]} {
			a.add(j, dur, origin+int64(s.wl.Duration))
			if st := s.wl.StepAt; st > 0 && j.At >= st && a.g.Objective > 0 && (j.out == expired || j.out == served && j.end-j.arrival > int64(a.g.Objective)) {
				a.g.Recovery = max(a.g.Recovery, (j.At-st)/stepWindow*stepWindow+stepWindow)
			}
		}
	}
	r := &Result{Policy: policy, Periods: s.q.periods, Throttled: s.q.throttled}
	for _, k := range order {
		r.Groups = append(r.Groups, groups[k].group())
	}
	for _, a := range classes {
		if a != nil {
			r.Classes = append(r.Classes, a.group())
		}
	}
	return r
}

type acc struct {
	g      Group
	served []float64
	all    []float64
	sum    float64 // of the served latencies
}

func (a *acc) add(j *job, dur float64, endBy int64) {
	g := &a.g
	g.Requests++
	lat := math.Inf(1)
	switch j.out {
	case served:
		g.Served++
		lat = float64(j.end-j.arrival) / 1e9
		a.served = append(a.served, lat)
		a.sum += lat
		g.Makespan = max(g.Makespan, float64(j.end-origin)/1e9)
		if g.Objective == 0 && j.end <= endBy || g.Objective > 0 && j.end-j.arrival <= int64(g.Objective) {
			g.Within++
			g.Goodput += j.CPU.Seconds() / dur
		}
	case refused:
		g.Refused++
	case expired:
		g.Expired++
	}
	a.all = append(a.all, lat)
}

func (a *acc) group() Group {
	slices.Sort(a.served)
	slices.Sort(a.all)
	a.g.P50, a.g.P99 = quantile(a.served, 0.5), quantile(a.served, 0.99)
	a.g.P99All = quantile(a.all, 0.99)
	a.g.Mean = math.NaN()
	if len(a.served) > 0 {
		a.g.Mean = a.sum / float64(len(a.served))
	}
	return a.g
}

// quantile is the q-quantile of sorted xs (nearest rank; NaN when empty).
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(q*float64(len(xs)))) - 1
	return xs[max(0, min(i, len(xs)-1))]
}
