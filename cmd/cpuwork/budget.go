package main

import (
	"encoding/json"
	"fmt"
	"github.com/cpuwork/cpuwork/cmd/cpuwork/internal/cli"
	"io"
	"math"
	"os"
	"text/tabwriter"

	"github.com/cpuwork/cpuwork/budget"
	"github.com/spf13/cobra"
)

// budgetReport is the --json shape of `cpuwork budget`.
type budgetReport struct {
	PID int `json:"pid"`
	budget.Budget
	Slots int `json:"slots"` // tasks an executor with default Options runs at once (executorSlots)
	// PacedSlot: the last of Slots is the fractional quota's paced slot
	// (Options.Quota QuotaFraction, the default).
	PacedSlot bool   `json:"paced_slot"`
	Warning   string `json:"warning"` // non-empty when GOMAXPROCS exceeds the quota
}

// executorSlots is the slot count of an executor made with default
// Options on b: under a quota with a fraction of at least 0.01 and at
// least one whole core, ceil(quota) slots, the last paced, when
// GOMAXPROCS (in force, else the runtime's default) leaves a P for it
// (the library's pacer, internal/pacer); else the whole cores of the budget
// (budget.Budget.Slots).
func executorSlots(b budget.Budget) (n int, paced bool) {
	n = b.Slots()
	l, ok := b.Limiting()
	if !ok || l.Period <= 0 {
		return n, false
	}
	procs := b.GOMAXPROCS
	if procs == 0 {
		procs = b.RuntimeGOMAXPROCS
	}
	whole := math.Floor(b.Cores)
	if frac := b.Cores - whole; frac < 0.01 || whole < 1 || (procs > 0 && int(whole)+1 > procs) {
		return n, false
	}
	return int(whole) + 1, true
}

func budgetCmd() *cobra.Command {
	var asJSON bool
	var pid int
	cmd := &cobra.Command{
		Use:   "budget",
		Short: "Print the CPU budget: quotas, affinity, GOMAXPROCS and what cpuwork uses",
		Long: `Print the effective CPU budget of this process (or of --pid N): the cgroup
v1/v2 CPU quota of the leaf cgroup and of every ancestor visible in the mount
(the smallest wins; the Go runtime reads only the leaf), the affinity mask,
GOMAXPROCS, the GOMAXPROCS the Go runtime's default rule picks
(min(affinity, max(2, ceil(leaf quota)))), and the slot count an executor
with default options uses (the budget's whole cores, plus one paced slot
for a quota's fraction when GOMAXPROCS leaves a P for it). Warns when GOMAXPROCS exceeds the quota,
which means CFS throttling.

All CPU amounts are in cores (1.25 = 1250m).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var b budget.Budget
			var err error
			if pid < 0 {
				return cli.UsageError(fmt.Errorf("budget: --pid %d: must be a process ID (or 0 for this process)", pid))
			}
			p := pid
			if pid == 0 {
				p = os.Getpid()
				b, err = budget.Detect()
			} else {
				b, err = budget.DetectPID(pid)
			}
			if err != nil {
				return err
			}
			r := budgetReport{PID: p, Budget: b, Warning: b.Warning()}
			r.Slots, r.PacedSlot = executorSlots(b)
			if r.Limits == nil {
				r.Limits = []budget.Limit{} // [] rather than null: docs/bench.md, "results.json"
			}
			if r.Notes == nil {
				r.Notes = []string{}
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(r)
			}
			printBudget(cmd.OutOrStdout(), r, pid == 0)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of a table (CPU amounts in cores, durations in nanoseconds)")
	cmd.Flags().IntVar(&pid, "pid", 0, "inspect process PID instead of this one (reads /proc/PID/cgroup and mountinfo; 0 = self)")
	return cmd
}

func printBudget(w io.Writer, r budgetReport, self bool) {
	b := r.Budget
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "pid\t%d\n", r.PID)
	fmt.Fprintf(tw, "budget\t%.3g cores\t(from %s%s)\n", b.Cores, b.Source, dirSuffix(b.SourceDir))
	switch b.CgroupVersion {
	case 0:
		fmt.Fprintf(tw, "cgroup\tnone found\n")
	default:
		fmt.Fprintf(tw, "cgroup\tv%d %s\t%s\n", b.CgroupVersion, b.CgroupPath, b.CgroupDir)
	}
	switch {
	case b.QuotaUnknown != "":
		fmt.Fprintf(tw, "quota\tunknown (%s)\n", b.QuotaUnknown)
	case len(b.Limits) == 0:
		fmt.Fprintf(tw, "quota\tnone\n")
	}
	for _, l := range b.Limits {
		where := "ancestor"
		if l.Leaf {
			where = "leaf"
		}
		fmt.Fprintf(tw, "quota\t%.3g cores\t%v per %v at %s (%s)\n", l.Cores, l.Quota, l.Period, l.Dir, where)
	}
	fmt.Fprintf(tw, "affinity\t%d CPUs\n", b.Affinity)
	if self {
		fmt.Fprintf(tw, "NumCPU\t%d\n", b.NumCPU)
		fmt.Fprintf(tw, "GOMAXPROCS\t%d\t(in force in this process)\n", b.GOMAXPROCS)
	}
	env := "unset"
	switch {
	case b.GOMAXPROCSEnvUnknown != "":
		env = "unknown (" + b.GOMAXPROCSEnvUnknown + ")"
	case b.GOMAXPROCSEnv != "":
		env = b.GOMAXPROCSEnv
	}
	fmt.Fprintf(tw, "GOMAXPROCS env\t%s\n", env)
	rule := "(Go >= 1.25: min(affinity, max(2, ceil(leaf quota))))"
	if b.GOMAXPROCSEnvUnknown != "" {
		rule = "(Go >= 1.25's rule, if the GOMAXPROCS variable is unset: it could not be read)"
	}
	fmt.Fprintf(tw, "runtime default\t%d\t%s\n", b.RuntimeGOMAXPROCS, rule)
	if b.Shares != 0 {
		fmt.Fprintf(tw, "cpu.shares\t%d\n", b.Shares)
	}
	if b.Weight != 0 {
		fmt.Fprintf(tw, "cpu.weight\t%d\n", b.Weight)
	}
	if b.RequestCores != 0 {
		fmt.Fprintf(tw, "request hint\t%.3g cores\t(Kubernetes shares/weight conversion)\n", b.RequestCores)
	}
	if r.PacedSlot {
		fmt.Fprintf(tw, "cpuwork slots\t%d\t(the quota's whole cores and one paced for its fraction: Options.Quota QuotaFraction, the default)\n", r.Slots)
	} else {
		fmt.Fprintf(tw, "cpuwork slots\t%d\t(the whole cores of the budget, at least 1, at most GOMAXPROCS)\n", r.Slots)
	}
	for _, n := range b.Notes {
		fmt.Fprintf(tw, "note\t%s\n", n)
	}
	tw.Flush()
	if r.Warning != "" {
		fmt.Fprintf(w, "\nWARNING: %s.\n", r.Warning)
	}
}

func dirSuffix(d string) string {
	if d == "" {
		return ""
	}
	return " at " + d
}
