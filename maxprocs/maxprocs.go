// Package maxprocs sets GOMAXPROCS from the CPU budget (package budget)
// with an explicit rounding policy. It is opt-in: nothing in cpuwork calls
// it implicitly.
//
// Calling runtime.GOMAXPROCS(n) switches off the Go runtime's own tracking
// of the cgroup CPU limit (Go >= 1.25 re-reads it about once a second and
// adjusts GOMAXPROCS; see GOROOT/src/runtime/cgroup_linux.go and
// runtime.SetDefaultGOMAXPROCS). Set compensates by following the budget (budget.WatchFunc)
// itself: when the quota, the affinity mask or the cpuset changes, it
// applies the policy again. The undo function stops following and hands
// GOMAXPROCS back to the runtime's default (runtime.SetDefaultGOMAXPROCS),
// which switches the runtime's own tracking back on. When the GOMAXPROCS
// environment variable is set, Set leaves GOMAXPROCS alone.
//
// Why a policy: the runtime rounds a quota up (max(2, ceil(quota))), so a
// 1.25-CPU container runs 2 Ps, and CPU-bound goroutines spend the quota in
// 62.5 ms of each 100 ms period and are throttled for the rest. Floor keeps
// parallelism within the quota; BudgetPlusOne keeps one spare P for
// latency-sensitive goroutines beside demoted batch threads
// (cpuwork.Options.Batch.SpareP).
package maxprocs

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/cpuwork/cpuwork/budget"
)

// Policy turns a budget in cores into GOMAXPROCS.
type Policy int

const (
	// Floor is floor(cores), at least 1: parallelism never exceeds the quota.
	Floor Policy = iota
	// Ceil is ceil(cores): the runtime's rule without its minimum of 2.
	Ceil
	// BudgetPlusOne is floor(cores)+1: one P more than the cores, for
	// executors with SpareP and demoted batch threads.
	BudgetPlusOne
)

func (p Policy) String() string {
	switch p {
	case Floor:
		return "floor"
	case Ceil:
		return "ceil"
	case BudgetPlusOne:
		return "budget+1"
	}
	return fmt.Sprintf("policy(%d)", int(p))
}

// Procs applies p to a budget of cores (float64, 1.25 = 1250m), capped at
// the affinity count for Floor and Ceil.
func (p Policy) Procs(cores float64, affinity int) int {
	if p == BudgetPlusOne {
		return budget.Whole(cores, false) + 1
	}
	n := budget.Whole(cores, p == Ceil)
	if affinity > 0 {
		n = min(n, affinity)
	}
	return n
}

// Options configures Set. The zero value is Floor, at least 1, following
// the budget every budget.DefaultWatchInterval, without logging.
type Options struct {
	// Policy turns the budget into GOMAXPROCS; the zero value is Floor.
	Policy Policy
	// Min is a lower bound on GOMAXPROCS; 0 means 1, negative is invalid.
	Min int
	// Interval is how often the budget is re-read while following; 0
	// means budget.DefaultWatchInterval (1 s).
	Interval time.Duration
	// NoFollow sets GOMAXPROCS once and does not follow budget changes.
	NoFollow bool
	// Logger logs every GOMAXPROCS change; nil logs nothing.
	Logger *slog.Logger
}

// Set sets GOMAXPROCS to o.Policy applied to the current budget and,
// unless o.NoFollow, keeps it there as the budget changes (through
// budget.WatchFunc). It returns an undo function (safe to call more than
// once) and an error when the budget cannot be read or an option is
// invalid; on error GOMAXPROCS is unchanged. When the GOMAXPROCS
// environment variable is set, Set respects it and changes nothing (the
// undo is then a no-op).
func Set(o Options) (undo func(), err error) {
	return set(o, budget.Detect)
}

func set(o Options, detect func() (budget.Budget, error)) (undo func(), err error) {
	p := o.Policy
	if o.Min == 0 {
		o.Min = 1
	}
	c := struct {
		log      *slog.Logger
		min      int
		interval time.Duration
		follow   bool
		detect   func() (budget.Budget, error)
	}{o.Logger, o.Min, o.Interval, !o.NoFollow, detect}
	if p < Floor || p > BudgetPlusOne {
		return func() {}, fmt.Errorf("maxprocs: unknown policy %d", int(p))
	}
	if c.min < 1 {
		return func() {}, fmt.Errorf("maxprocs: Options.Min %d must be >= 0", o.Min)
	}
	if env := os.Getenv("GOMAXPROCS"); env != "" {
		if c.log != nil {
			c.log.Info("maxprocs: GOMAXPROCS is set in the environment; leaving it", "GOMAXPROCS", env)
		}
		return func() {}, nil
	}
	b, err := c.detect()
	if err != nil {
		return func() {}, fmt.Errorf("maxprocs: %w", err)
	}
	apply := func(b budget.Budget) {
		n := max(p.Procs(b.Cores, b.Affinity), c.min)
		if prev := runtime.GOMAXPROCS(n); prev != n && c.log != nil {
			c.log.Info("maxprocs: set GOMAXPROCS", "from", prev, "to", n, "policy", p.String(), "cores", b.Cores, "source", string(b.Source))
		}
	}
	apply(b)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	if c.follow {
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := b.Cores
			for ch := range budget.WatchFunc(ctx, c.interval, c.detect) {
				if ch.Err != nil {
					if c.log != nil {
						c.log.Warn("maxprocs: re-read budget", "err", ch.Err)
					}
					continue
				}
				if ch.Budget.Cores != last {
					last = ch.Budget.Cores
					apply(ch.Budget)
				}
			}
		}()
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			runtime.SetDefaultGOMAXPROCS()
		})
	}, nil
}
