package bench

import (
	"math"
	"runtime/metrics"
)

// gcStopName is the runtime's histogram of the time stop-the-world phases
// of the GC waited for every P to stop (Go >= 1.24). A P held by a thread
// the kernel does not run cannot stop: starved demoted threads show here.
const gcStopName = "/sched/pauses/stopping/gc:seconds"

// pauseProbe reads the GC stopping-pause histogram at two moments.
type pauseProbe struct{ start []uint64 }

func startPauses() pauseProbe {
	s := []metrics.Sample{{Name: gcStopName}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return pauseProbe{}
	}
	return pauseProbe{start: append([]uint64(nil), s[0].Value.Float64Histogram().Counts...)}
}

// stop returns the number of GC stopping pauses since start and the
// upper bound of the largest one's bucket, in seconds (ok false where the
// metric does not exist).
func (p pauseProbe) stop() (n uint64, maxS float64, ok bool) {
	if p.start == nil {
		return 0, 0, false
	}
	s := []metrics.Sample{{Name: gcStopName}}
	metrics.Read(s)
	h := s[0].Value.Float64Histogram()
	for i, c := range h.Counts {
		if d := c - p.start[i]; d > 0 {
			n += d
			maxS = h.Buckets[i+1]
		}
	}
	if math.IsInf(maxS, 1) {
		maxS = h.Buckets[len(h.Buckets)-2]
	}
	return n, maxS, true
}
