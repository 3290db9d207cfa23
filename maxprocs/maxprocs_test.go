package maxprocs

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cpuwork/cpuwork/budget"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestPolicies(t *testing.T) {
	tests := []struct {
		p        Policy
		cores    float64
		affinity int
		want     int
	}{
		{Floor, 1.25, 4, 1}, {Floor, 0.25, 4, 1}, {Floor, 2, 4, 2}, {Floor, 8, 4, 4},
		{Ceil, 1.25, 4, 2}, {Ceil, 0.25, 4, 1}, {Ceil, 3.0, 2, 2},
		{BudgetPlusOne, 2, 2, 3}, {BudgetPlusOne, 1.5, 4, 2},
	}
	for _, tt := range tests {
		if got := tt.p.Procs(tt.cores, tt.affinity); got != tt.want {
			t.Errorf("%s(%v cores, %d CPUs) = %d, want %d", tt.p, tt.cores, tt.affinity, got, tt.want)
		}
	}
}

func TestSetFollowsTheBudgetAndUndoRestoresTheDefault(t *testing.T) {
	t.Setenv("GOMAXPROCS", "")
	defaultProcs := runtime.GOMAXPROCS(0)
	var cores atomic.Value
	cores.Store(1.5)
	detect := func() (budget.Budget, error) {
		return budget.Budget{Cores: cores.Load().(float64), Affinity: 64}, nil
	}
	undo, err := set(Options{Policy: BudgetPlusOne, Interval: time.Millisecond}, detect)
	if err != nil {
		t.Fatal(err)
	}
	if got := runtime.GOMAXPROCS(0); got != 2 {
		t.Errorf("GOMAXPROCS %d, want 2 for 1.5 cores with budget+1", got)
	}
	cores.Store(3.0)
	deadline := time.Now().Add(5 * time.Second)
	for runtime.GOMAXPROCS(0) != 4 {
		if time.Now().After(deadline) {
			t.Fatalf("GOMAXPROCS %d never followed the budget to 4", runtime.GOMAXPROCS(0))
		}
		time.Sleep(time.Millisecond)
	}
	undo()
	undo()
	if got := runtime.GOMAXPROCS(0); got != defaultProcs {
		t.Errorf("after undo GOMAXPROCS %d, want the runtime default %d", got, defaultProcs)
	}
}

func TestSetRejectsBadArgumentsAndRespectsTheEnvironment(t *testing.T) {
	if _, err := Set(Options{Policy: Policy(9)}); err == nil {
		t.Error("unknown policy accepted")
	}
	if _, err := Set(Options{Min: -1}); err == nil {
		t.Error("Min -1 accepted")
	}
	t.Setenv("GOMAXPROCS", "3")
	before := runtime.GOMAXPROCS(0)
	undo, err := set(Options{}, func() (budget.Budget, error) { return budget.Budget{Cores: 1, Affinity: 8}, nil })
	if err != nil || runtime.GOMAXPROCS(0) != before {
		t.Errorf("with GOMAXPROCS set: err %v, GOMAXPROCS %d -> %d", err, before, runtime.GOMAXPROCS(0))
	}
	undo()
}
