package sim

import (
	"math"
	"math/rand/v2"

	"github.com/cpuwork/cpuwork/internal/admission"
)

// The peers below are models of what teams deploy in front of a Go
// service, written from their sources' rules; each names its source. A
// gate decides who enters; the admitted run as goroutines do (sliced):
// a gate that lets more tasks in than there are slots gets them
// time-sliced on the Ps, as the real service would.

// gate is a peer's admission rule in front of the goroutines.
type gate interface {
	// admit answers a new arrival: run it now, queue it, or refuse it.
	admit(j *job) verdict
	// ended is told when an admitted job ends (served), after it left
	// the gate's count; it returns the queued jobs to run now, in order.
	ended(j *job) []*job
	// left is told that a queued job's client gave up.
	left(j *job)
}

type verdict uint8

const (
	runNow verdict = iota
	queueIt
	refuseIt
)

// gated runs a gate's admitted jobs as goroutines. Every job it runs
// came through the gate, so every served job releases its place.
type gated struct {
	s   *sim
	g   gate
	run *sliced
}

func newGated(s *sim, g gate) *gated {
	p := &gated{s: s, g: g, run: newSliced(s)}
	s.onServed = p.served
	return p
}

func (p *gated) arrive(j *job) {
	switch p.g.admit(j) {
	case runNow:
		p.run.arrive(j)
	case queueIt:
		p.s.waiting(j)
	default:
		p.s.end(j, refused)
	}
}

// served is the sim's hook on every served job: it frees its place in
// the gate, which may start queued ones.
func (p *gated) served(j *job) {
	for _, n := range p.g.ended(j) {
		p.run.arrive(n)
	}
}

func (p *gated) done(j *job) { p.run.done(j) }

func (p *gated) expire(j *job) {
	p.g.left(j)
	p.s.end(j, expired)
}

func (p *gated) tick(gen uint64) { p.run.tick(gen) }

// fifoQueue is a gate's queue in arrival order; a job whose client left
// is skipped when it comes up.
type fifoQueue struct {
	q    []*job
	head int
	n    int // live jobs in it
}

func (f *fifoQueue) push(j *job) { f.q = append(f.q, j); f.n++ }

func (f *fifoQueue) pop() *job {
	for f.head < len(f.q) {
		j := f.q[f.head]
		f.q[f.head] = nil
		f.head++
		if f.head > 1024 && f.head*2 > len(f.q) {
			f.q = append(f.q[:0], f.q[f.head:]...)
			f.head = 0
		}
		if j.out == pending {
			f.n--
			return j
		}
	}
	return nil
}

// semPerClass is a semaphore per class, as a server that separates its
// interactive and batch work ships it (zoekt's shape, the bench's
// two-sem): Critical and Interactive share one of a permit per slot,
// Batch and Background one of a quarter of the slots (at least 1), each
// with a queue of twice its permits that answers 503 when full, waiters
// leaving when their client gives up. Both run as goroutines on the
// same Ps, so the permits may exceed the slots.
type semPerClass struct {
	permits, inUse [2]int
	queue          [2]fifoQueue
}

func newSemPerClass(slots int) *semPerClass {
	return &semPerClass{permits: [2]int{slots, max(1, slots/4)}}
}

func permitKind(c admission.Class) int {
	if c <= admission.Interactive {
		return 0
	}
	return 1
}

func (g *semPerClass) admit(j *job) verdict {
	k := permitKind(j.Class)
	if g.inUse[k] < g.permits[k] && g.queue[k].n == 0 {
		g.inUse[k]++
		return runNow
	}
	if g.queue[k].n >= 2*g.permits[k] {
		return refuseIt
	}
	g.queue[k].push(j)
	return queueIt
}

func (g *semPerClass) ended(j *job) []*job {
	k := permitKind(j.Class)
	g.inUse[k]--
	if n := g.queue[k].pop(); n != nil {
		g.inUse[k]++
		return []*job{n}
	}
	return nil
}

func (g *semPerClass) left(j *job) { g.queue[permitKind(j.Class)].n-- }

// gradient2 is Netflix concurrency-limits' Gradient2Limit behind its
// SimpleLimiter (concurrency-limits-core, limit/Gradient2Limit.java and
// limiter/SimpleLimiter.java), with the library's defaults: a request
// is refused at once when the requests in flight reach the limit; each
// one that ends feeds its round-trip time (from its admission) to the
// limit, which is left alone while under half of it is in flight, and
// otherwise moves toward limit x gradient + 4 with smoothing 0.2, the
// gradient being 1.5 x the long RTT (an exponential average over 600
// samples, the first 10 averaged) over this RTT, held to [0.5, 1]; the
// long RTT decays by 5 % when it is over twice this one; the limit
// stays within [20, 200] from an initial 20.
type gradient2 struct {
	limit, longRTT float64
	samples        int
	inflight       int
	now            func() int64
}

func newGradient2(now func() int64) *gradient2 {
	return &gradient2{limit: 20, now: now}
}

func (g *gradient2) admit(j *job) verdict {
	if float64(g.inflight) >= math.Floor(g.limit) {
		return refuseIt
	}
	g.inflight++
	j.admitted = g.now()
	return runNow
}

func (g *gradient2) ended(j *job) []*job {
	inflight := g.inflight
	g.inflight--
	rtt := float64(g.now() - j.admitted)
	g.update(max(rtt, 1), inflight)
	return nil
}

func (g *gradient2) left(*job) {}

func (g *gradient2) update(rtt float64, inflight int) {
	const (
		smoothing, tolerance, queueSize = 0.2, 1.5, 4.0
		minLimit, maxLimit              = 20.0, 200.0
		window, warmup                  = 600, 10
	)
	g.samples++
	if g.samples <= warmup {
		g.longRTT += (rtt - g.longRTT) / float64(g.samples)
	} else {
		f := 2.0 / (window + 1)
		g.longRTT = g.longRTT*(1-f) + rtt*f
	}
	if g.longRTT/rtt > 2 {
		g.longRTT *= 0.95
	}
	if float64(inflight) < g.limit/2 {
		return
	}
	grad := max(0.5, min(1.0, tolerance*g.longRTT/rtt))
	n := g.limit*grad + queueSize
	n = g.limit*(1-smoothing) + n*smoothing
	g.limit = max(minLimit, min(maxLimit, n))
}

// prioritized is failsafe-go's adaptive limiter with its queue and a
// prioritizer (adaptivelimiter's queueingLimiter, computeRejectionRate,
// and internal/priority's Prioritizer), as the real-server bench's
// failsafe-prio configures it (WithQueueing(2, 3), WithMaxWaitTime at the
// objective): under the limit a request runs at once; over it, it queues
// unless the queue is past twice the limit, where it is refused with a
// rate rising linearly to 1 at three times the limit, and once a
// rejection rate exists, every request whose priority level is under the
// rate's quantile of the recent levels is refused (Critical and
// Interactive spread over the high levels, Batch and Background over the
// low, as failsafe-go's priorities map to levels). A waiter leaves at
// its client's deadline. Its limit is modelled with Gradient2's rule
// (failsafe-go's own adaptive limit also follows the latency's rise over
// its baseline; its throughput correlation is not modelled).
type prioritized struct {
	lim   *gradient2
	queue fifoQueue
	rng   *rand.Rand
	// recent is a ring of the last levelWindow levels, count their
	// histogram (levels 0 to 499).
	recent []int
	next   int
	count  [500]int
}

// levelWindow is how many recent levels the rejection threshold is the
// quantile of.
const levelWindow = 1000

func newPrioritized(now func() int64, seed uint64) *prioritized {
	return &prioritized{lim: newGradient2(now), rng: rand.New(rand.NewPCG(seed, 0x6661696c))}
}

func (g *prioritized) level(c admission.Class) int {
	// failsafe-go: five priorities of 100 levels each, a request's level
	// drawn within its priority's band.
	band := map[admission.Class]int{admission.Critical: 4, admission.Interactive: 3, admission.Batch: 1, admission.Background: 0}[c]
	return band*100 + g.rng.IntN(100)
}

func (g *prioritized) admit(j *job) verdict {
	lv := g.level(j.Class)
	if len(g.recent) < levelWindow {
		g.recent = append(g.recent, lv)
	} else {
		g.count[g.recent[g.next]]--
		g.recent[g.next] = lv
		g.next = (g.next + 1) % levelWindow
	}
	g.count[lv]++
	if float64(g.lim.inflight) < math.Floor(g.lim.limit) && g.queue.n == 0 {
		g.lim.inflight++
		j.admitted = g.lim.now()
		return runNow
	}
	l := math.Floor(g.lim.limit)
	from, to := 2*l, 3*l
	rate := 0.0
	switch q := float64(g.queue.n); {
	case q >= to:
		rate = 1
	case q > from:
		rate = (q - from) / (to - from)
	}
	if rate >= 1 {
		return refuseIt
	}
	if rate > 0 && lv < g.threshold(rate) {
		return refuseIt
	}
	g.queue.push(j)
	return queueIt
}

// threshold is the rate-quantile of the recent levels: the level under
// which a request is refused.
func (g *prioritized) threshold(rate float64) int {
	k := min(len(g.recent)-1, int(rate*float64(len(g.recent))))
	for lv, seen := 0, 0; lv < len(g.count); lv++ {
		if seen += g.count[lv]; seen > k {
			return lv
		}
	}
	return len(g.count) - 1
}

func (g *prioritized) ended(j *job) []*job {
	g.lim.ended(j)
	var out []*job
	for float64(g.lim.inflight) < math.Floor(g.lim.limit) {
		n := g.queue.pop()
		if n == nil {
			break
		}
		g.lim.inflight++
		n.admitted = g.lim.now()
		out = append(out, n)
	}
	return out
}

func (g *prioritized) left(*job) { g.queue.n-- }

// clairvoyant is the reference every policy is measured against, not a
// peer: it knows each request's CPU time at arrival, runs the requests
// in the order of their deadlines (arrival plus the class's objective:
// first come, first served within one objective) on the slots without
// preempting them, and admits a request only if, behind the work
// admitted ahead of it, it still ends within its objective; the rest it
// refuses at once. It never spends a slot on a request that misses, so
// no policy that serves in arrival order can have more goodput within
// the objective; a policy that refuses long requests to serve more short
// ones can (the matrix prints such a cell above 1x). Closed-loop work is
// not run (each of its tasks is refused, its client retrying after a
// task's time): batch is taken to have the slots' idle time, the
// work-conserving bound the matrix judges batch work by.
type clairvoyant struct {
	s    *sim
	free []int64 // each slot's time free in the schedule of the admitted
}

func newClairvoyant(s *sim) *clairvoyant {
	return &clairvoyant{s: s, free: make([]int64, s.wl.Slots)}
}

func (p *clairvoyant) arrive(j *job) {
	s := p.s
	if j.loop >= 0 {
		s.end(j, refused) // closed loops are not run (see the type's doc)
		return
	}
	i := 0
	for k := range p.free {
		if p.free[k] < p.free[i] {
			i = k
		}
	}
	start := max(s.now, p.free[i])
	end := start + int64(j.CPU)
	if obj := s.wl.Objective[j.Class]; obj > 0 && end-j.arrival > int64(obj) {
		s.end(j, refused)
		return
	}
	p.free[i] = end
	j.start = start
	s.push(end, evDone, j, 0)
}

func (p *clairvoyant) done(j *job) { p.s.end(j, served) }
func (p *clairvoyant) expire(*job) {}
func (p *clairvoyant) tick(uint64) {}
