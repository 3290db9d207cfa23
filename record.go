package cpuwork

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cpuwork/cpuwork/internal/admission"
	"github.com/cpuwork/cpuwork/internal/cputime"
	"github.com/cpuwork/cpuwork/internal/trace"
)

// RecordOptions keeps a record of the most recent requests submitted with
// Do (the HTTP and gRPC middleware's), and refused by Allow, for
// `cpuwork simulate` to replay through every admission policy
// (Executor.WriteTrace). Tasks of Go, TryGo and For are not recorded; a
// Do inside a recorded request's fn runs on its slot and is part of it,
// except under Observe, where it is recorded as a request of its own.
// The zero value records nothing.
//
// A request's recorded CPU time is, when enforcing, the time it held its
// slot, less its time off the slot at Checkpoints. Under Observe it is
// its thread's CPU clock (CLOCK_THREAD_CPUTIME_ID) read before and after
// fn when it ended on the thread it started on and the observed requests
// never outnumbered GOMAXPROCS meanwhile (work on its goroutine, cgo
// calls included; blind to goroutines fn starts); otherwise, when the
// runtime may have run another request in its stead, its share of the
// process's CPU time as processor sharing over the observed requests
// would give it, counted in Stats.Record.Estimated: right on the whole,
// not request by request, since Go's scheduler does not share the CPU
// evenly at every instant (LockThreads makes every one exact). On
// systems without a thread CPU clock (other than Linux) it is the wall
// time fn ran.
type RecordOptions struct {
	// Requests is how many of the most recent requests are kept: a ring
	// of 56 bytes a request, allocated by New (DefaultRecordRequests,
	// 3.5 MiB, is about a minute of a service answering 1,000 requests a
	// second). 0 keeps none unless Observe is set, which then keeps
	// DefaultRecordRequests; negative makes New fail.
	Requests int

	// Observe runs every Do at once (Critical and Interactive on the
	// caller's goroutine, Batch and Background on a goroutine of their
	// own, as on a worker): no slot, no queue, no refusal (Allow admits
	// everything; only Close and a done ctx still stop a task), so the
	// service runs as it would without cpuwork while its requests are
	// recorded, at six system calls a request (a few microseconds).
	// Checkpoint acts as outside any task (it yields the P when
	// goroutines wait for one, and returns ctx's error) and nothing is
	// accounted (Options.Account) while observing.
	Observe bool

	// LockThreads, with Observe, locks each request's goroutine to its
	// thread (runtime.LockOSThread) while it runs, so that its thread's
	// CPU clock is its own however many requests run: every CPU time is
	// exact. The cost is the service's: the runtime hands a locked
	// request's thread off and back at each preemption, which lengthens
	// the latency of a service whose requests outnumber its Ps; leave it
	// off to record a production service.
	LockThreads bool
}

// DefaultRecordRequests is RecordOptions.Requests' value under Observe
// when it is 0.
const DefaultRecordRequests = 1 << 16

// maxRecordRequests bounds RecordOptions.Requests (56 MiB of records).
const maxRecordRequests = 1 << 20

// reqRecorder is the executor's ring of recent requests (RecordOptions).
type reqRecorder struct {
	observe bool
	lock    bool // RecordOptions.LockThreads
	seed    maphash.Seed
	mu      sync.Mutex
	ring    []recEntry
	n       uint64 // requests recorded in all; the newest is ring[(n-1)%len]
	// inflight counts the observed requests running; estimated those
	// whose CPU time was estimated (cpuSince).
	inflight  atomic.Int64
	estimated atomic.Uint64
	// crowded counts the observed requests that started with more
	// running than GOMAXPROCS (cpuSince); fair is their processor-sharing
	// clock.
	crowded atomic.Uint64
	fair    fairClock
}

// recEntry is one recorded request: 56 bytes.
type recEntry struct {
	arrival  int64  // now() ns
	cpu      int64  // ns on a core (observe) or holding a slot; 0: it never ran
	wait     int64  // ns from arrival to its slot (and waits for it again at Checkpoints)
	deadline int64  // ns from arrival to its ctx's deadline; 0: none
	target   int64  // ns from arrival to its latency target; 0: none
	key      uint64 // digest of its key (WithKey); 0: none
	class    Class
	outcome  trace.Outcome
	estimate bool // cpu is an estimate (cpuSince)
}

func newRecorder(o RecordOptions) (*reqRecorder, error) {
	n := o.Requests
	switch {
	case n < 0 || n > maxRecordRequests:
		return nil, fmt.Errorf("cpuwork: Options.Record.Requests %d out of range 0..%d", n, maxRecordRequests)
	case n == 0 && !o.Observe:
		return nil, nil
	case n == 0:
		n = DefaultRecordRequests
	}
	return &reqRecorder{observe: o.Observe, lock: o.Observe && o.LockThreads, seed: maphash.MakeSeed(), ring: make([]recEntry, n)}, nil
}

// add records x, overwriting the oldest record once the ring is full.
func (r *reqRecorder) add(x recEntry) {
	r.mu.Lock()
	r.ring[r.n%uint64(len(r.ring))] = x
	r.n++
	r.mu.Unlock()
}

// entry is the record of a request of class c submitted with ctx now
// (at): its arrival (its target's, when it carries one), key, deadline
// and target.
func (r *reqRecorder) entry(ctx context.Context, c Class, at int64) recEntry {
	x := recEntry{arrival: at, class: c}
	if arr, lat, ok := admission.TargetOf(ctx); ok {
		x.arrival = min(arr, at)
		if lat > 0 {
			x.target = lat
		}
	}
	if d, ok := ctx.Deadline(); ok {
		x.deadline = max(int64(time.Until(d))+at-x.arrival, 1)
	}
	if k, ok := admission.KeyOf(ctx); ok {
		x.key = maphash.String(r.seed, k) | 1
	}
	return x
}

// recRun wraps a recorded task's fn: the times its slot began and ended
// and its time off the slot at Checkpoints. call is run bound once, so
// that a pooled recRun submits without allocating.
type recRun struct {
	fn             func(context.Context) error
	call           func(context.Context) error
	started, ended int64
	offSlot        int64
}

var recRuns = sync.Pool{New: func() any {
	rr := new(recRun)
	rr.call = rr.run
	return rr
}}

func (rr *recRun) run(ctx context.Context) error {
	rr.started = now()
	defer rr.stop()
	return rr.fn(ctx)
}

// stop ends the run (a panic of fn included): its end, and the time its
// task spent off its slot.
func (rr *recRun) stop() {
	rr.ended = now()
	if t := runningTask(); t != nil {
		rr.offSlot = t.offSlot
	}
}

// doRecorded is Do under a recorder: observed, or submitted as usual
// and recorded with how it ended. A nested call (fn of a task of e)
// is part of its outer request and is not recorded apart.
func (e *Executor) doRecorded(ctx context.Context, c Class, fn func(context.Context) error, r *reqRecorder) error {
	if err := e.checkArgs(ctx, c, fn); err != nil {
		return err
	}
	if t := runningTask().of(e); t != nil {
		return e.do(ctx, c, 1, fn)
	}
	x := r.entry(ctx, c, now())
	if r.observe {
		return e.observe(ctx, c, fn, r, x)
	}
	rr := recRuns.Get().(*recRun)
	rr.fn, rr.started, rr.offSlot = fn, 0, 0
	err := e.do(ctx, c, 1, rr.call)
	if rr.started != 0 {
		x.outcome = trace.Served
		x.wait = rr.started - x.arrival + rr.offSlot
		x.cpu = max(rr.ended-rr.started-rr.offSlot, 1)
	} else {
		x.outcome = outcomeOf(err)
		x.wait = now() - x.arrival
	}
	rr.fn = nil
	recRuns.Put(rr)
	r.add(x)
	return err
}

// outcomeOf is how a task that never ran ended, by Do's error.
func outcomeOf(err error) trace.Outcome {
	switch {
	case errors.Is(err, ErrDeadline):
		return trace.RefusedDeadline
	case errors.Is(err, ErrSaturated), errors.Is(err, ErrClosed):
		return trace.Refused
	default:
		return trace.GaveUp
	}
}

// observe runs fn at once for RecordOptions.Observe and records its
// thread's CPU time; a panic becomes a *PanicError as under Do.
func (e *Executor) observe(ctx context.Context, c Class, fn func(context.Context) error, r *reqRecorder, x recEntry) error {
	// Admitted before the closed check, Close sets closed before it
	// counts: either Close waits for this task or the task sees it closed.
	s := &e.stats[c]
	s.Admitted.Inc(0)
	if e.g.Closed() || ctx.Err() != nil {
		s.Completed.Inc(0)
		if e.g.Closed() {
			e.checkDrained()
			s.Rejected.Add(1)
			return ErrClosed
		}
		s.Canceled.Add(1)
		x.outcome, x.wait = trace.GaveUp, now()-x.arrival
		r.add(x)
		return ctx.Err()
	}
	if c.runsOnWorker() {
		// Batch and Background run off the submitter's goroutine, as on
		// a worker under Do: a Goexit ends that goroutine, not the
		// submitter's, and becomes ErrGoexit.
		done := make(chan error, 1)
		go func() {
			exited := true
			defer func() {
				if exited {
					done <- ErrGoexit
				}
			}()
			err := e.observeRun(ctx, c, fn, r, x)
			exited = false
			done <- err
		}()
		return <-done
	}
	return e.observeRun(ctx, c, fn, r, x)
}

// observeRun runs fn on the calling goroutine and records its CPU time
// (cpuStart, cpuSince); a panic becomes a *PanicError.
func (e *Executor) observeRun(ctx context.Context, c Class, fn func(context.Context) error, r *reqRecorder, x recEntry) (err error) {
	s := &e.stats[c]
	if r.lock {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	}
	start := now()
	from := r.cpuStart()
	defer func() {
		cpu, exact := r.cpuSince(from, now()-start)
		if !exact {
			r.estimated.Add(1)
			x.estimate = true
		}
		if v := recover(); v != nil {
			s.panicked.Add(1)
			err = &PanicError{Class: c, Value: v, Stack: debug.Stack()}
		}
		x.outcome, x.wait, x.cpu = trace.Served, start-x.arrival, max(cpu, 1)
		r.add(x)
		s.Completed.Inc(0)
		if e.g.Closed() {
			e.checkDrained()
		}
	}()
	return fn(ctx)
}

// cpuReading is what an observed request's CPU time is measured from:
// its thread, that thread's CPU clock, and the process's CPU time.
type cpuReading struct {
	tid     int
	crowded uint64  // reqRecorder.crowded then
	share   float64 // the fair-share clock then
	thread  time.Duration
	ok      bool
}

// cpuStart counts an observed request in and reads the clocks at its
// start.
func (r *reqRecorder) cpuStart() cpuReading {
	var s cpuReading
	s.share = r.fair.count(1)
	if r.inflight.Add(1) > int64(runtime.GOMAXPROCS(0)) {
		r.crowded.Add(1)
	}
	s.crowded = r.crowded.Load()
	s.tid = cputime.TID()
	s.thread, s.ok = cputime.Thread()
	return s
}

// fairClock is processor sharing's virtual time over the observed
// requests: at each start and end it advances by the process's CPU time
// since the last one over the requests running meanwhile, so that a
// request's share of the CPU used while it ran is the clock's advance
// over its life.
type fairClock struct {
	mu      sync.Mutex
	last    time.Duration // the process's CPU time at the last event
	v       float64       // ns of CPU per running request, cumulative
	running int64
}

// advance moves the clock to the process's CPU time now; f.mu is held.
func (f *fairClock) advance() {
	cpu, _ := cputime.Process()
	if cpu > f.last {
		if f.running > 0 {
			f.v += float64(cpu-f.last) / float64(f.running)
		}
		f.last = cpu
	}
}

// count advances the clock, counts d requests in (1) or out (-1) and
// returns the clock.
func (f *fairClock) count(d int64) float64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.advance()
	f.running += d
	return f.v
}

// cpuSince is the CPU time of a request observed from s for wall ns, and
// whether it is its thread's own. It is the thread's CPU clock since s
// when the goroutine ended on the thread it started on and the observed
// requests never outnumbered GOMAXPROCS meanwhile (none started with
// more running, and fewer run at its end): the runtime had no other
// request to run on that thread in its stead. Otherwise — it may have
// been preempted for another request, or moved threads — its share of
// the CPU the process used while it ran, as processor sharing would give
// it (fairClock), at most its wall time; an estimate, counted in
// RecordStats.Estimated. Without a thread CPU clock: its wall time. It
// counts the request out.
func (r *reqRecorder) cpuSince(s cpuReading, wall int64) (int64, bool) {
	thread, _ := cputime.Thread()
	exact := r.lock || cputime.TID() == s.tid && r.crowded.Load() == s.crowded && r.inflight.Load() <= int64(runtime.GOMAXPROCS(0))
	r.inflight.Add(-1)
	share := r.fair.count(-1) - s.share
	switch {
	case !s.ok:
		return wall, false
	case exact:
		return min(int64(thread-s.thread), wall), true
	}
	return min(int64(share), wall), false
}

// recordRefusal records a request Allow refused (err).
func (e *Executor) recordRefusal(ctx context.Context, c Class, err error) {
	r := e.rec
	at := now()
	x := r.entry(ctx, c, at)
	x.outcome, x.wait = outcomeOf(err), at-x.arrival
	r.add(x)
}

// WriteTrace writes the recorded requests (Options.Record), oldest
// arrival first, as the CSV trace `cpuwork simulate --trace` replays:
// arrival_ms (from the first), class, cpu_ms (empty for a request that
// never ran), deadline_ms, target_ms, key (a digest of the WithKey
// string, the same for the same key within this process), outcome
// (served, refused, refused-deadline, gave-up), queue_wait_ms, kind
// (empty) and cpu_estimated (1 where cpu_ms is an estimate); cpu_ms as
// RecordOptions says. It copies the ring under a
// lock that submissions also take (a few milliseconds at the largest
// ring), then writes without it. It returns w's first error, or an error
// when the executor records nothing.
func (e *Executor) WriteTrace(w io.Writer) error {
	mustExec(e)
	r := e.rec
	if r == nil {
		return errors.New("cpuwork: the executor records no requests (set Options.Record)")
	}
	r.mu.Lock()
	n := min(r.n, uint64(len(r.ring)))
	recs := make([]recEntry, n)
	for i := range n {
		recs[i] = r.ring[(r.n-n+i)%uint64(len(r.ring))]
	}
	r.mu.Unlock()
	slices.SortStableFunc(recs, func(a, b recEntry) int { return int(a.arrival - b.arrival) })
	tw := trace.NewWriter(w)
	for _, x := range recs {
		rec := trace.Record{
			Arrival: time.Duration(x.arrival - recs[0].arrival), Class: admission.Class(x.class),
			CPU: time.Duration(x.cpu), Deadline: time.Duration(x.deadline), Target: time.Duration(x.target),
			Outcome: x.outcome, QueueWait: time.Duration(max(x.wait, 0)), Estimated: x.estimate,
		}
		if x.key != 0 {
			rec.Key = fmt.Sprintf("%016x", x.key)
		}
		if err := tw.Write(rec); err != nil {
			return err
		}
	}
	if n == 0 {
		_, err := io.WriteString(w, strings.Join(trace.Columns, ",")+"\n")
		return err
	}
	return tw.Flush()
}

// RecordStats is Stats.Record: the recorder's state.
type RecordStats struct {
	Observe  bool   // RecordOptions.Observe: nothing is admitted, queued or refused
	Kept     int    // requests in the ring now
	Capacity int    // the ring's size (RecordOptions.Requests)
	Recorded uint64 // requests recorded since New
	// Estimated counts the observed requests whose CPU time is an
	// estimate: they moved to another thread while they ran
	// (RecordOptions.Observe).
	Estimated uint64
}

func (r *reqRecorder) stats() RecordStats {
	if r == nil {
		return RecordStats{}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return RecordStats{Observe: r.observe, Kept: int(min(r.n, uint64(len(r.ring)))), Capacity: len(r.ring), Recorded: r.n, Estimated: r.estimated.Load()}
}
