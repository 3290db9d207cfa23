package cpuwork

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cpuwork/cpuwork/cgroup"
)

// fractionChild runs in a 1.5-CPU cgroup (TestFractionalSlotInARealCgroup):
// an executor with zero Options keeps two Batch loops busy for 1.5 s and
// prints its slot count and whether the fractional slot is paced.
func fractionChild() {
	e, err := New(Options{WatchInterval: -1})
	if err != nil {
		fmt.Println(`{"err":"` + err.Error() + `"}`)
		os.Exit(1)
	}
	var wg sync.WaitGroup
	var running, most atomic.Int64 // tasks running at once, and the most seen
	t0, cpu0 := time.Now(), processCPU()
	stop := t0.Add(1500 * time.Millisecond)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				e.Do(context.Background(), Batch, func(ctx context.Context) error {
					n := running.Add(1)
					defer running.Add(-1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					x := uint64(1)
					for i := range 2_000_000 {
						x = x*6364136223846793005 + 1442695040888963407
						if i%20_000 == 0 {
							// A task waiting in Checkpoint for its slot
							// back does not hold one: not counted.
							running.Add(-1)
							Checkpoint(ctx)
							n := running.Add(1)
							for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
							}
						}
					}
					sinkU.Store(x)
					return nil
				})
			}
		}()
	}
	wg.Wait()
	cores := (processCPU() - cpu0).Seconds() / time.Since(t0).Seconds()
	out, _ := json.Marshal(map[string]any{"slots": e.Slots(), "fractional": e.frac != nil, "cores": cores, "most": most.Load()})
	e.Close(context.Background())
	fmt.Println(string(out))
}

// TestFractionalSlotInARealCgroup: in a real 1.5-CPU cgroup the zero
// Options run ceil(1.5) = 2 slots with the fractional slot paced, run two
// tasks at once at some point (the fraction is used) and leave most
// periods unthrottled (two unpaced busy slots are throttled in nearly
// every period).
func TestFractionalSlotInARealCgroup(t *testing.T) {
	if runtime.GOOS != "linux" || os.Geteuid() != 0 || cgroup.Version() == 0 {
		t.Skip("needs root and a cgroup CPU controller to create a quota cgroup")
	}
	if runtime.NumCPU() < 2 {
		t.Skip("needs 2 CPUs for a 1.5-CPU quota")
	}
	g, err := cgroup.New(cgroup.Config{Name: cgroup.OwnedName("fraction-test"), Parent: "cpuwork-test-fraction", CPUs: 1.5})
	if err != nil {
		t.Skip("cannot create a quota cgroup here:", err)
	}
	defer g.Remove()
	files, err := g.OpenProcs()
	if err != nil {
		t.Fatal(err)
	}
	// Join the group before the Go runtime starts: the child is a shell
	// that moves itself in, then executes the test binary.
	cmd := exec.Command("sh", "-c", `echo $$ > "$1" && exec "$2" -test.run '^$'`, "sh", g.ProcsFile(), os.Args[0])
	for _, f := range files {
		f.Close()
	}
	cmd.Env = append(os.Environ(), "CPUWORK_FRACTION_CHILD=1", "GOMAXPROCS=")
	before, _ := g.Stat()
	t0 := time.Now()
	out, err := cmd.Output()
	wall := time.Since(t0)
	if err != nil {
		t.Fatalf("child: %v: %s", err, out)
	}
	after, err := g.Stat()
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Slots      int
		Fractional bool
		Cores      float64 // the child's CPU over its busy window
		Most       int     // tasks seen running at once
	}
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("child output %q: %v", out, err)
	}
	periods, throttled := after.Periods-before.Periods, after.ThrottledPeriods-before.ThrottledPeriods
	t.Logf("slots %d fractional %v; %d of %d periods throttled; %.2f cores used over the busy 1.5 s (child ran %v)", r.Slots, r.Fractional, throttled, periods, r.Cores, wall.Round(time.Millisecond))
	if r.Slots != 2 || !r.Fractional {
		t.Errorf("slots %d, fractional pacing %v; want 2 slots, paced", r.Slots, r.Fractional)
	}
	if periods == 0 || throttled*2 > periods {
		t.Errorf("%d of %d periods throttled: want fewer than half", throttled, periods)
	}
	// The extra slot was used: two tasks ran at once. (The cores used
	// are logged, not judged: a loaded machine gives the child less.)
	if r.Most != 2 {
		t.Errorf("at most %d tasks ran at once: the fractional slot was never open", r.Most)
	}
}

var sinkU atomic.Uint64
