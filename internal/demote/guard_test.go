//go:build linux

package demote

import (
	"os"
	"testing"
	"time"
)

// The guard reads a thread's state from field 3 of its stat file, after
// the command, which may hold spaces and parentheses.
func TestThreadRunnableReadsTheStateAfterTheCommand(t *testing.T) {
	for _, c := range []struct {
		stat string
		want bool
	}{
		{"4242 (worker) R 1 4242 0", true},
		{"4242 (a) b) R) S 1 4242 0", false},
		{"4242 (a (b) R) R 1 4242 0", true},
		{"4242 (cmd) S 1 4242 0", false},
		{"4242 (cmd)", false},
		{"", false},
	} {
		f, err := os.CreateTemp(t.TempDir(), "stat")
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString(c.stat)
		if got := threadRunnable(f, make([]byte, 256)); got != c.want {
			t.Errorf("threadRunnable(%q) = %v, want %v", c.stat, got, c.want)
		}
		f.Close()
	}
}

// Stats is the guard's counters (Stats.Demotion while demotion is
// enabled).
func TestDemotionStatsComeFromTheGuard(t *testing.T) {
	var g Guard
	g.suspensions.Store(2)
	g.promotions.Store(3)
	g.retired.Store(1)
	g.starvedNs.Store(int64(5 * time.Millisecond))
	st := g.Stats()
	if st.Suspensions != 2 || st.Promotions != 3 || st.Retired != 1 || st.StarvedTime != 5*time.Millisecond {
		t.Errorf("stats %+v", st)
	}
}

// Beside's guard averages others' CPU use over time, not over its ticks:
// on a loaded machine the ticks come late, and an average over ticks kept
// a thread starved by another process counted as starved by the process's
// own work for 300 ms (a full test run: the guard never fired). With the
// process using no CPU and its 2 CPUs all others', ticks 100 ms apart
// decide "others" at the first; ticks 5 ms apart after about 30 ms, as
// before.
func TestBesideGuardAveragesOthersOverTimeNotTicks(t *testing.T) {
	for _, c := range []struct {
		tick         time.Duration
		busyAfter    int // ticks still counted as own work
		notBusyAfter int // ticks by which others are seen
	}{
		{100 * time.Millisecond, 0, 1},
		{guardInterval, 3, 10},
	} {
		g := &Guard{ownCPUs: 2}
		const p = int64(time.Second) // the process's CPU time never moves
		w := int64(time.Hour)
		g.weighOthers(p, w)
		for i := 1; i <= c.notBusyAfter; i++ {
			w += int64(c.tick)
			own := g.weighOthers(p, w)
			if i <= c.busyAfter && !own {
				t.Errorf("ticks %v apart: others seen after %d ticks, want after more than %d", c.tick, i, c.busyAfter)
			}
			if i == c.notBusyAfter && own {
				t.Errorf("ticks %v apart: after %d ticks of others taking both CPUs the starvation still counts as the process's own (others %.2f CPUs)", c.tick, i, g.others)
			}
		}
	}
}

// Beside's guard counts a demoted thread's starvation only while others
// could fill the CPUs a stop-the-world frees: about half of the process's
// CPUs. On 2 CPUs, a process using 1.6 of them beside a load generator
// (others 0.4) and one using 1.3 beside a CPU-bound process it competes
// with (others 0.7) leave a CPU free when they stop: their starvation is
// their own. A process held to 1 CPU (others 1.0, a neighbour as busy as
// itself) is not; under a 1.5-CPU quota half a CPU is the bound, as
// before. The guard once suspended demotion in every run of a server at
// twice its capacity beside its load generator.
func TestBesideGuardCountsOnlyANeighbourThatCouldFillTheCPUs(t *testing.T) {
	for _, c := range []struct {
		own, used float64 // the CPUs the process may run on, and uses
		ownWork   bool
	}{
		{2, 1.6, true},
		{2, 1.3, true},
		{2, 1.0, false},
		{2, 0, false},
		{1.5, 1.1, true},
		{1.5, 0.9, false},
		{1, 0.6, true},
		{1, 0.4, false},
		{8, 5, true},
		{8, 4, false},
	} {
		g := &Guard{ownCPUs: c.own}
		p, w := int64(time.Second), int64(time.Hour)
		g.weighOthers(p, w)
		var own bool
		for range 200 { // 1 s of 5-ms ticks
			w += int64(guardInterval)
			p += int64(c.used * float64(guardInterval))
			own = g.weighOthers(p, w)
		}
		if own != c.ownWork {
			t.Errorf("%v CPUs, the process using %v (others %.2f): starvation counted as its own work %v, want %v",
				c.own, c.used, g.others, own, c.ownWork)
		}
	}
}
