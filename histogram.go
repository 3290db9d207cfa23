package cpuwork

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// histogram is a lock-free log-linear histogram of durations in
// nanoseconds: 16 linear sub-buckets per power of two, so every recorded
// value is reported within 1/16 (6.25 %) of its true value, from 1 ns to
// 2^42 ns (73 minutes; larger values land in the last bucket). Recording is
// one atomic add to a bucket plus one to the sum; it never allocates. The
// layout follows HdrHistogram's with one significant figure of sub-buckets.
type histogram struct {
	counts [histBuckets]atomic.Uint64
	sum    atomic.Int64 // ns
	max    atomic.Int64 // ns
}

const (
	histSubBits = 4
	histSub     = 1 << histSubBits
	histMaxExp  = 42
	histBuckets = (histMaxExp - histSubBits + 2) * histSub
)

func histIndex(v int64) int {
	if v < histSub {
		if v < 0 {
			return 0
		}
		return int(v)
	}
	exp := bits.Len64(uint64(v)) - 1 // >= histSubBits
	if exp > histMaxExp {
		return histBuckets - 1
	}
	sub := int(v>>(exp-histSubBits)) & (histSub - 1)
	return (exp-histSubBits+1)*histSub + sub
}

// histLower returns the smallest value of bucket i.
func histLower(i int) int64 {
	if i < histSub {
		return int64(i)
	}
	exp := i/histSub + histSubBits - 1
	sub := int64(i % histSub)
	return (histSub + sub) << (exp - histSubBits)
}

// record adds one observation of d nanoseconds, counted weight times.
func (h *histogram) record(d int64, weight uint64) {
	h.counts[histIndex(d)].Add(weight)
	h.sum.Add(d * int64(weight))
	for {
		m := h.max.Load()
		if d <= m || h.max.CompareAndSwap(m, d) {
			return
		}
	}
}

// Histogram is a distribution of durations: its count, mean and quantiles,
// and its cumulative buckets for exporters (Cumulative[i] observations were
// at most UpperSeconds[i] seconds; empty buckets at either end left out).
// Quantiles are the midpoint of the bucket that holds them, at most Max.
type Histogram struct {
	Count uint64        // observations (sampled ones count with their weight)
	Mean  time.Duration // arithmetic mean
	P50   time.Duration // median
	P90   time.Duration
	P99   time.Duration
	P999  time.Duration
	Max   time.Duration // exact maximum observed

	UpperSeconds []float64 `json:",omitempty"`
	Cumulative   []uint64  `json:",omitempty"`
	SumSeconds   float64
}

// quantile returns the q-quantile (0 <= q <= 1) of a bucket snapshot; the
// value is the midpoint of the bucket that holds it, capped at max.
func quantile(counts []uint64, total uint64, q float64, max int64) time.Duration {
	if total == 0 {
		return 0
	}
	rank := uint64(q*float64(total) + 0.5)
	rank = min(max64(rank, 1), total)
	var seen uint64
	for i, c := range counts {
		seen += c
		if seen >= rank {
			lo := histLower(i)
			hi := lo
			if i+1 < len(counts) {
				hi = histLower(i + 1)
			}
			v := lo + (hi-lo)/2
			return time.Duration(min(v, max))
		}
	}
	return time.Duration(max)
}

func max64(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}

// snapshot returns h's distribution. Concurrent records may land between
// the bucket reads; the quantiles come from one copy of the counts.
func (h *histogram) snapshot() Histogram {
	counts := make([]uint64, histBuckets)
	var total uint64
	for i := range counts {
		counts[i] = h.counts[i].Load()
		total += counts[i]
	}
	s := Histogram{Count: total, Max: time.Duration(h.max.Load()), SumSeconds: time.Duration(h.sum.Load()).Seconds()}
	if total == 0 {
		return s
	}
	s.Mean = time.Duration(h.sum.Load() / int64(total))
	m := h.max.Load()
	s.P50 = quantile(counts, total, 0.50, m)
	s.P90 = quantile(counts, total, 0.90, m)
	s.P99 = quantile(counts, total, 0.99, m)
	s.P999 = quantile(counts, total, 0.999, m)
	s.UpperSeconds, s.Cumulative = cumulative(counts)
	return s
}

// cumulative returns the cumulative counts of a bucket snapshot with their
// upper bounds in seconds, for exporters (Prometheus histograms). Empty
// leading and trailing buckets are left out.
func cumulative(counts []uint64) (upper []float64, cum []uint64) {
	first, last := -1, -1
	for i, c := range counts {
		if c != 0 {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	if first < 0 {
		return nil, nil
	}
	var n uint64
	for i := first; i <= last; i++ {
		n += counts[i]
		upper = append(upper, float64(histLower(i+1))/1e9)
		cum = append(cum, n)
	}
	return upper, cum
}
