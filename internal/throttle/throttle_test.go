package throttle

import (
	"testing"
	"time"
)

func TestPause(t *testing.T) {
	for _, c := range []struct {
		quota, cores float64
		want         time.Duration
	}{
		{1.5, 2, 25 * time.Millisecond}, // 2 threads spend 150 ms of quota in 75 ms
		{1.25, 2, 37500 * time.Microsecond},
		{0.5, 1, 50 * time.Millisecond},
		{2, 2, 0}, // the cores cannot pass the quota
		{1.5, 1, 0},
		{0, 2, 0},
	} {
		if got := Pause(c.quota, c.cores, 100*time.Millisecond); got != c.want {
			t.Errorf("Pause(%v, %v, 100ms) = %v, want %v", c.quota, c.cores, got, c.want)
		}
	}
}

// A 1.5-CPU quota's 25 ms pause is absorbed by a 1 s or a 180 ms
// objective and costs a 100 ms one (a quarter) or a 20 ms one; under a
// millisecond costs nothing; with no objective known any pause of a
// millisecond or more costs.
func TestCosts(t *testing.T) {
	for _, c := range []struct {
		added, latency time.Duration
		want           bool
	}{
		{25 * time.Millisecond, time.Second, false},
		{25 * time.Millisecond, 180 * time.Millisecond, false},
		{25 * time.Millisecond, 101 * time.Millisecond, false},
		{25 * time.Millisecond, 100 * time.Millisecond, true},
		{25 * time.Millisecond, 20 * time.Millisecond, true},
		{500 * time.Microsecond, time.Millisecond, false},
		{25 * time.Millisecond, 0, true},
	} {
		if got := Costs(c.added, c.latency); got != c.want {
			t.Errorf("Costs(%v, %v) = %v, want %v", c.added, c.latency, got, c.want)
		}
	}
}

// A 1.5-CPU quota's 25 ms pause misses a 25 ms or a 20 ms objective
// and no longer one (100 ms, 26 ms: the request it catches keeps the
// rest); under a millisecond misses nothing; with no objective known
// any pause of a millisecond or more misses.
func TestMisses(t *testing.T) {
	for _, c := range []struct {
		pause, objective time.Duration
		want             bool
	}{
		{25 * time.Millisecond, time.Second, false},
		{25 * time.Millisecond, 100 * time.Millisecond, false},
		{25 * time.Millisecond, 26 * time.Millisecond, false},
		{25 * time.Millisecond, 25 * time.Millisecond, true},
		{25 * time.Millisecond, 20 * time.Millisecond, true},
		{500 * time.Microsecond, 100 * time.Microsecond, false},
		{25 * time.Millisecond, 0, true},
	} {
		if got := Misses(c.pause, c.objective); got != c.want {
			t.Errorf("Misses(%v, %v) = %v, want %v", c.pause, c.objective, got, c.want)
		}
	}
}
