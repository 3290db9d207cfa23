package cpuwork

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cpuwork/cpuwork/budget"
	"github.com/cpuwork/cpuwork/cgroup"
)

// besideResult is what besideChild prints.
type besideResult struct {
	InGroup bool    // the batch task's thread ran in the batch cgroup
	Cap     float64 // the group's quota at the end, cores
	Gone    bool    // the group was removed by Close
	Err     string  // Close's error
}

// besideChild runs in a 1.5-CPU cgroup (TestBesideUnderAQuotaCapsBatch):
// Beside, one Batch task spinning 1.2 s with no Checkpoint, beside two
// goroutines submitting 2 ms Interactive tasks every 5 ms. Prints whether
// the batch task's thread ran in the batch cgroup, the cap at the end,
// and whether the group is gone after Close.
func besideChild() {
	runtime.GOMAXPROCS(4) // Beside: a P for each batch slot
	e, err := New(Options{WatchInterval: -1, Batch: BatchOptions{Beside: true}})
	if err != nil {
		fmt.Println(`{"err":"` + err.Error() + `"}`)
		os.Exit(1)
	}
	spin := func(d time.Duration) {
		x, end := uint64(1), time.Now().Add(d)
		for time.Now().Before(end) {
			for i := range 10_000 {
				x = x*6364136223846793005 + uint64(i)
			}
		}
		sinkU.Store(x)
	}
	var r besideResult
	dir := ""
	if e.batchGroup != nil {
		dir = e.batchGroup.Dir()
	}
	var wg sync.WaitGroup
	var stop atomic.Bool
	wg.Add(1)
	go func() {
		defer wg.Done()
		e.Do(context.Background(), Batch, func(context.Context) error {
			b, _ := os.ReadFile("/proc/thread-self/cgroup")
			for _, l := range strings.Split(string(b), "\n") {
				if strings.Contains(l, ":cpu") && strings.Contains(l, "cpuwork-batch-") {
					r.InGroup = true
				}
			}
			spin(1200 * time.Millisecond)
			return nil
		})
		stop.Store(true)
	}()
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				e.Do(context.Background(), Interactive, func(context.Context) error { spin(2 * time.Millisecond); return nil })
				time.Sleep(3 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	if e.batchGroup != nil {
		r.Cap = e.batchGroup.Cores()
	}
	if err := e.Close(context.Background()); err != nil {
		r.Err = err.Error()
	}
	if dir != "" {
		_, err := os.Stat(dir)
		r.Gone = os.IsNotExist(err)
	}
	out, _ := json.Marshal(r)
	fmt.Println(string(out))
}

// Under a 1.5-CPU quota, Beside's batch thread runs in the batch cgroup,
// capped to what the Interactive work leaves, so that batch work that
// never reaches a Checkpoint does not get the whole cgroup throttled: at
// most a third of the periods throttled, where batch's 1 core beside
// 0.8 of Interactive work throttles nearly every one. The group is
// removed at Close.
func TestBesideUnderAQuotaCapsBatch(t *testing.T) {
	if cgroup.Version() != 1 {
		t.Skip("the batch cgroup needs cgroup v1")
	}
	var r besideResult
	out, periods, throttled, wall := runInQuota(t, 1.5, "beside")
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("child output %q: %v", out, err)
	}
	t.Logf("batch thread in the group %v, cap %.2f cores at the end, %d of %d periods throttled (child ran %v)", r.InGroup, r.Cap, throttled, periods, wall.Round(time.Millisecond))
	if r.Err != "" {
		t.Errorf("Close: %s", r.Err)
	}
	if !r.InGroup {
		t.Error("the batch task's thread did not run in the batch cgroup")
	}
	if !r.Gone {
		t.Error("the batch cgroup was left behind after Close")
	}
	if periods == 0 || throttled*3 > periods {
		t.Errorf("%d of %d periods throttled: want at most a third", throttled, periods)
	}
}

// A budget whose quota is not a cgroup's (a test's, a stale one) makes
// no batch cgroup: the executor touches no cgroup it did not read the
// quota from.
func TestBesideUnderAQuotaNotACgroupMakesNoGroup(t *testing.T) {
	dir := t.TempDir()
	detect := func() (budget.Budget, error) {
		return budget.Budget{Cores: 1.5, GOMAXPROCS: 4, Affinity: runtime.NumCPU(), Source: budget.SourceCgroupV1,
			Limits: []budget.Limit{{Dir: dir, Period: 100 * time.Millisecond, Cores: 1.5}}}, nil
	}
	e := newExec(t, Options{Batch: BatchOptions{Beside: true}, detect: detect, WatchInterval: time.Hour})
	if e.batchGroup != nil {
		t.Errorf("a batch cgroup was made at %s for a quota read from %s, not a cgroup", e.batchGroup.Dir(), dir)
	}
}
