package bench

import (
	"math"
	"slices"
	"time"
)

// StepLoad is a step in the offered load: From requests/s until At after
// the start, then the run's rate. The zero value is no step.
type StepLoad struct {
	From float64
	At   time.Duration
}

// stepPacer sends from requests/s until at, then to requests/s, each phase
// timed as vegeta's constant pacer times its hits: hit n of a phase at
// (n+1) intervals from the phase's start.
type stepPacer struct {
	from, to int
	at       time.Duration
}

// firstPhase is the number of hits sent before the step.
func (p stepPacer) firstPhase() uint64 {
	return uint64(float64(p.from) * p.at.Seconds())
}

// sendAt is when hit n is due, from the attack's start.
func (p stepPacer) sendAt(n uint64) time.Duration {
	if n1 := p.firstPhase(); n >= n1 {
		return p.at + time.Duration(n-n1+1)*(time.Second/time.Duration(p.to))
	}
	return time.Duration(n+1) * (time.Second / time.Duration(p.from))
}

// Pace implements vegeta.Pacer: the wait until hit number hits is due.
func (p stepPacer) Pace(elapsed time.Duration, hits uint64) (time.Duration, bool) {
	return p.sendAt(hits) - elapsed, false
}

// Rate implements vegeta.Pacer.
func (p stepPacer) Rate(elapsed time.Duration) float64 {
	if elapsed < p.at {
		return float64(p.from)
	}
	return float64(p.to)
}

// stepWindow is the width of the windows the step response is read in.
const stepWindow = 200 * time.Millisecond

// stepServed is one request answered after the step, for stepResponse:
// its arrival (intended send time) from the step, its latency, whether it
// was shed.
type stepServed struct {
	after   time.Duration
	latency time.Duration
	shed    bool
}

// stepResponse reads the requests that arrived after a step in windows of
// stepWindow by arrival: recovery is the time from the step to the end of
// the last window whose slowest served request missed the objective (0
// when none did; the time to the last window when the last one did: it
// never recovered within the run), and shedCV the coefficient of
// variation of the per-window shed share over the windows after recovery
// (0 with fewer than 3 windows or no shedding: a steady state sheds a
// steady share). A request the client gave up on, or that failed, counts
// as served at its latency (past the objective: the window missed it); a
// window whose requests were all shed has no served latency and misses
// nothing.
func stepResponse(rs []stepServed, slo, after time.Duration) (recovery time.Duration, recovered bool, shedCV float64) {
	n := int(after / stepWindow)
	if n < 1 {
		return 0, false, 0
	}
	type win struct {
		slowest   time.Duration
		shed, all int
	}
	ws := make([]win, n)
	for _, r := range rs {
		i := int(r.after / stepWindow)
		if i < 0 || i >= n {
			continue
		}
		ws[i].all++
		if r.shed {
			ws[i].shed++
			continue
		}
		ws[i].slowest = max(ws[i].slowest, r.latency)
	}
	last := -1
	for i, w := range ws {
		if w.slowest > slo {
			last = i
		}
	}
	recovered = last < n-1
	recovery = time.Duration(last+1) * stepWindow
	var shares []float64
	for _, w := range ws[last+1:] {
		if w.all > 0 {
			shares = append(shares, float64(w.shed)/float64(w.all))
		}
	}
	if len(shares) < 3 {
		return recovery, recovered, 0
	}
	mean := 0.0
	for _, s := range shares {
		mean += s
	}
	mean /= float64(len(shares))
	if mean == 0 || slices.Max(shares) == 0 {
		return recovery, recovered, 0
	}
	sd := 0.0
	for _, s := range shares {
		sd += (s - mean) * (s - mean)
	}
	return recovery, recovered, math.Sqrt(sd/float64(len(shares))) / mean
}
