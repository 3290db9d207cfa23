package sim

import (
	"context"
	"log/slog"
	"time"
	"unsafe"

	"github.com/cpuwork/cpuwork/internal/admission"
)

// granted drives cpuwork's Granter as the executor does for a task
// submitted with Go: TryAcquire, else Admit (the door and the queue);
// Owner.Wake starts a granted task or fails a refused one; Withdraw when
// the client's deadline ends a queued one; Record and Release when a
// task ends. The executor's defaults: a queue of DefaultQueueLimit per
// class, no SpareP.
type granted struct {
	s   *sim
	g   admission.Granter
	cnt [admission.NumClasses]admission.Counters
	// handOvers counts the slots handed over at a Checkpoint, refusal
	// the door's first reason for refusing an open-loop request: what a
	// cell's diagnosis reads.
	handOvers int
	refusal   string
}

// defaultQueueLimit is the executor's DefaultQueueLimit (the CLI's
// module cannot import the root's constant without the root's init).
const defaultQueueLimit = 1024

func newGranted(s *sim) (*granted, error) {
	p := &granted{s: s}
	cfg := admission.Config{DefaultQueueLimit: defaultQueueLimit, Owner: p,
		Log: slog.New(slog.DiscardHandler), Clock: func() int64 { return s.now }}
	for c := range p.cnt {
		cfg.Counters[c] = &p.cnt[c]
	}
	if err := p.g.Init(cfg); err != nil {
		return nil, err
	}
	p.g.SetCapacity(s.wl.Slots)
	return p, nil
}

// deadlineCtx is a context whose deadline is on the virtual clock; it is
// never done: the simulation withdraws a queued task at its deadline.
type deadlineCtx struct {
	context.Context
	at time.Time
}

func (c deadlineCtx) Deadline() (time.Time, bool) { return c.at, true }

func (p *granted) arrive(j *job) {
	s := p.s
	j.w = admission.MakeWaiter(j.Class, admission.KindTask, j)
	if p.g.TryAcquire(j.Class) {
		p.cnt[j.Class].Admitted.Inc(uintptr(unsafe.Pointer(j)))
		j.w.MarkStarted()
		j.held = p.s.now
		p.run(j)
		return
	}
	ctx := context.Background()
	if obj := s.wl.Objective[j.Class]; s.wl.Targets && obj > 0 || s.wl.Declared {
		var lat, svc time.Duration
		if s.wl.Targets {
			lat = obj
		}
		if s.wl.Declared {
			svc = j.CPU
		}
		ctx = admission.TargetContextAt(ctx, j.arrival, lat, svc)
	}
	if j.Key != "" {
		ctx = admission.WithKey(ctx, j.Key)
	}
	if j.Deadline > 0 && !s.wl.HideDeadline {
		ctx = deadlineCtx{ctx, admission.TimeAt(j.arrival + int64(j.Deadline))}
	}
	if err := p.g.Admit(ctx, &j.w); err != nil {
		if p.refusal == "" && j.loop < 0 {
			p.refusal = err.Error()
		}
		s.end(j, refused)
		return
	}
	s.waiting(j)
}

// Wake is the Owner's: start a granted task, fail a refused one, give
// a task queued again at a Checkpoint its slot back (through Await, as
// its goroutine would).
func (p *granted) Wake(w *admission.Waiter, _ *admission.Keep) {
	j := w.Task().(*job)
	if w.Requeued() {
		w.Signal()
		if p.g.Await(nil, w) != admission.WaitGranted {
			panic("sim: a task queued again at a Checkpoint woke without its slot")
		}
		j.held = p.s.now
		p.run(j)
		return
	}
	if w.Refusal() != nil {
		p.s.end(j, refused)
		return
	}
	w.TakeGrant()
	j.held = p.s.now
	p.run(j)
}

// run runs j on its slot until its next Checkpoint or its end.
func (p *granted) run(j *job) {
	s := p.s
	if j.start == 0 {
		j.start = s.now
	}
	j.from = s.cpuNow()
	d := j.left
	if j.step > 0 {
		d = min(d, j.step)
	}
	s.onCPU(1)
	s.pushCPU(d, evDone, j, 0)
}

// Released is the Owner's: nothing waits on a drain here; the pacer
// steps if its tick is late, as at the executor's task ends.
func (p *granted) Released() {
	if p.s.pacer != nil {
		p.s.pacer.MaybeStep()
	}
}

func (p *granted) done(j *job) {
	w := &j.w
	j.left -= p.s.cpuNow() - j.from
	p.s.onCPU(-1)
	if j.left > 0 { // a Checkpoint
		if p.g.Behind(j.Class, p.g.Rank(context.Background(), w)) || p.g.OverCommitted() {
			period := admission.SlotPeriod{W: w, Slot: p.s.now - j.held, Weight: 1, Waited: j.queued}
			if p.g.Requeue(w, &period, false) {
				p.handOvers++
				return // Wake runs it again
			}
		}
		p.run(j)
		return
	}
	p.g.Record(admission.SlotPeriod{W: w, Slot: p.s.now - j.held, Weight: 1, Waited: j.queued, Last: true})
	p.cnt[j.Class].Completed.Inc(uintptr(unsafe.Pointer(j)))
	p.g.Release(w, nil)
	p.s.end(j, served) // a loop's client submits again after the release, as a caller of Do does
}

func (p *granted) expire(j *job) {
	if p.g.Withdraw(&j.w) {
		p.s.end(j, expired)
	}
}

func (p *granted) tick(uint64) {}

// fifo is a worker pool, a semaphore or a bounded pool: one task per
// slot, the rest in one queue in arrival order, whatever their class.
type fifo struct {
	s       *sim
	running int
	queue   []*job // queue[head:] waits
	head    int
	leave   bool // a task whose client gave up leaves the queue (semaphore)
	// atObjective: a waiter leaves at its class's objective too, if
	// sooner than its client's deadline (sem-deadline).
	atObjective bool
	limit       int // > 0: refuse an arrival that finds this many queued; < 0: refuse one that would queue
}

func (p *fifo) arrive(j *job) {
	if p.running < p.s.wl.Slots && p.head == len(p.queue) {
		p.running++
		p.s.start(j)
		return
	}
	if p.limit < 0 || p.limit > 0 && len(p.queue)-p.head >= p.limit {
		p.s.end(j, refused)
		return
	}
	p.queue = append(p.queue, j)
	if p.leave {
		d := j.Deadline
		if o := p.s.wl.Objective[j.Class]; p.atObjective && o > 0 && (d == 0 || o < d) {
			d = o
		}
		p.s.waitingFor(j, d)
	} else {
		j.queued = true
	}
}

func (p *fifo) done(j *job) {
	p.s.onCPU(-1)
	p.running--
	for p.head < len(p.queue) && p.running < p.s.wl.Slots {
		n := p.queue[p.head]
		p.queue[p.head] = nil
		p.head++
		if n.out != pending { // left at its deadline
			continue
		}
		p.running++
		p.s.start(n)
	}
	if p.head > 1024 && p.head*2 > len(p.queue) {
		p.queue = append(p.queue[:0], p.queue[p.head:]...)
		p.head = 0
	}
	p.s.end(j, served)
}

// expire ends j, which left the queue (semaphore); done skips it.
func (p *fifo) expire(j *job) { p.s.end(j, expired) }

func (p *fifo) tick(uint64) {}

// sliced is a goroutine per request as the Go runtime runs them: the
// slots are Ps, runnable goroutines wait in one run queue in the order
// they became runnable, and a running one keeps its P until it ends or
// has run for a time slice (sysmon's preemption), when it goes to the
// back of the queue. A closed loop's client is one goroutine: its next
// task continues on its P within its slice.
type sliced struct {
	s     *sim
	runq  []*job // runq[head:] runnable
	head  int
	ps    []sliceP
	cont  int // the P whose loop goroutine continues (-1: none)
	slice int64
	// yield: a closed loop's goroutine also goes to the back of the run
	// queue at each of its Checkpoint steps (runtime.Gosched where
	// cpuwork's task calls Checkpoint), when another waits.
	yield bool
}

type sliceP struct {
	j     *job
	slice int64 // when j's time slice began
	gen   uint64
}

// timeSlice is the Go scheduler's forcePreemptNS.
const timeSlice = int64(10 * time.Millisecond)

func newSliced(s *sim) *sliced {
	return &sliced{s: s, ps: make([]sliceP, s.wl.Slots), cont: -1, slice: timeSlice}
}

func (p *sliced) arrive(j *job) {
	if p.cont >= 0 && j.loop >= 0 {
		i := p.cont
		p.cont = -1
		p.run(i, j, p.ps[i].slice)
		return
	}
	for i := range p.ps {
		if p.ps[i].j == nil {
			p.run(i, j, p.s.cpuNow())
			return
		}
	}
	p.runq = append(p.runq, j)
	if p.head == len(p.runq)-1 {
		// The run queue was empty: the running goroutines ran on past
		// their slices' ends with nobody to yield to; from now on each
		// is preempted at its slice's next end.
		for i := range p.ps {
			if p.ps[i].j != nil {
				p.arm(i)
			}
		}
	}
}

// run runs j on P i in a time slice that began at slice (on the CPU
// clock, sim.cpuNow).
func (p *sliced) run(i int, j *job, slice int64) {
	if j.start == 0 {
		j.start = p.s.now
	}
	P := &p.ps[i]
	j.from = p.s.cpuNow()
	P.j, P.slice = j, slice
	p.s.onCPU(1)
	p.arm(i)
}

// arm sets P i's next event: its goroutine's end or, while another
// waits in the run queue, the end of its time slice, whichever comes
// first. A goroutine that nobody waits for is not preempted (the
// scheduler would run it again at once), so a request's CPU time costs
// no events of its own: the replay's cost is independent of it.
func (p *sliced) arm(i int) {
	P := &p.ps[i]
	j := P.j
	now := p.s.cpuNow()
	at := j.from + j.left
	if p.head < len(p.runq) {
		// The time slices run back to back from P.slice.
		sl := p.slice
		if p.yield && j.loop >= 0 {
			if c := int64(p.s.wl.Loops[j.loop].Checkpoint); c > 0 {
				sl = min(sl, c)
			}
		}
		k := max(1, (now-P.slice+sl-1)/sl)
		at = min(at, P.slice+k*sl)
	}
	P.gen++
	p.s.pushCPU(at-now, evTick, nil, uint64(i)<<48|P.gen)
}

func (p *sliced) tick(gen uint64) {
	i := int(gen >> 48)
	P := &p.ps[i]
	if P.gen != gen&(1<<48-1) || P.j == nil {
		return
	}
	j := P.j
	now := p.s.cpuNow()
	j.left -= now - j.from
	j.from = now
	if j.left > 0 && p.head == len(p.runq) {
		p.arm(i) // its slice ended with nobody waiting: it runs on
		return
	}
	P.j = nil
	p.s.onCPU(-1)
	if j.left <= 0 {
		if j.loop >= 0 {
			p.cont = i
		}
		p.s.end(j, served)
		p.cont = -1
		if P.j != nil { // the loop's goroutine goes on
			return
		}
	} else {
		p.runq = append(p.runq, j) // preempted: to the back
	}
	if p.head < len(p.runq) {
		n := p.runq[p.head]
		p.runq[p.head] = nil
		p.head++
		p.run(i, n, p.s.cpuNow())
	}
	if p.head > 1024 && p.head*2 > len(p.runq) {
		p.runq = append(p.runq[:0], p.runq[p.head:]...)
		p.head = 0
	}
}

// A goroutine's work does not stop when its client gives up.
func (p *sliced) done(*job)   {}
func (p *sliced) expire(*job) {}
