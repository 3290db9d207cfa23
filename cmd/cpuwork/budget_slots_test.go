package main

import (
	"strings"
	"testing"
	"time"

	"github.com/cpuwork/cpuwork/budget"
)

// `cpuwork budget` reports the slots an executor with default options
// runs, the paced slot of a fractional quota included (it said floor of
// the budget, which is QuotaFloor's count, not the default's).
func TestBudgetReportsTheExecutorsSlots(t *testing.T) {
	quota := func(q float64, procs int) budget.Budget {
		return budget.Budget{Cores: q, GOMAXPROCS: procs, Affinity: 4, Source: budget.SourceCgroupV1,
			Limits: []budget.Limit{{Dir: "/x", Period: 100 * time.Millisecond, Cores: q}}}
	}
	for _, tc := range []struct {
		name  string
		b     budget.Budget
		n     int
		paced bool
	}{
		{"1.5 CPUs, GOMAXPROCS 2", quota(1.5, 2), 2, true},
		{"1.5 CPUs, GOMAXPROCS 1", quota(1.5, 1), 1, false},
		{"2 CPUs", quota(2, 2), 2, false},
		{"0.5 CPUs", quota(0.5, 2), 1, false},
		{"2.5 CPUs, another process at the runtime's default", func() budget.Budget {
			b := quota(2.5, 0)
			b.RuntimeGOMAXPROCS = 3
			return b
		}(), 3, true},
		{"no quota", budget.Budget{Cores: 4, GOMAXPROCS: 4, Affinity: 4, Source: budget.SourceAffinity}, 4, false},
	} {
		if n, paced := executorSlots(tc.b); n != tc.n || paced != tc.paced {
			t.Errorf("%s: %d slots, paced %v; want %d, %v", tc.name, n, paced, tc.n, tc.paced)
		}
	}
}

func TestBudgetSaysAnUnreadableQuotaIsUnknown(t *testing.T) {
	var out strings.Builder
	printBudget(&out, budgetReport{Budget: budget.Budget{QuotaUnknown: "read cpu.max: permission denied"}}, false)
	if !strings.Contains(out.String(), "unknown (read cpu.max: permission denied)") || strings.Contains(out.String(), "quota  none") {
		t.Errorf("budget table:\n%s", out.String())
	}
}
