// Command cpuwork measures, diagnoses and inspects CPU-bound Go work.
//
//	cpuwork bench [--quick] [--scenario S] [--out DIR] [--json]   measure every claim (runs cpuwork-bench)
//	cpuwork simulate [--trace F] [--slots N] [--objective C=D]   replay a workload on a virtual clock
//	cpuwork budget [--json] [--pid N]   the CPU budget and what GOMAXPROCS should be
//	cpuwork run [--cpus 1.5] [--weight N] [--cpuset 0-1] [--idle] -- CMD   run CMD in a new cgroup
//	cpuwork doctor --pid N [--url URL] [--duration 5s] [--json]   diagnose a running process
package main

import (
	"github.com/cpuwork/cpuwork/cmd/cpuwork/internal/cli"
	"io"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	os.Exit(execute(os.Args[1:], os.Stderr))
}

// execute runs the CLI with args and returns its exit status (cli.Execute).
func execute(args []string, stderr io.Writer) int { return cli.Execute(rootCmd(), args, stderr) }

func rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "cpuwork",
		Short: "Run CPU-bound Go work at the speed of the cores you really have",
		Long: `cpuwork measures, diagnoses and inspects CPU-bound work in Go services.

  bench    every claim measured side by side on real work, with a report
           (the bench is its own program, cpuwork-bench, which this runs)
  run      run a command in a new CPU cgroup and report its throttling
  doctor   diagnose a running process: throttling, GOMAXPROCS above the quota,
           OS starvation, oversubscription, timer starvation, GC pressure
  simulate replay a workload through cpuwork's admission code and the usual
           alternatives on a virtual clock: exact, no machine noise
  budget   the CPU budget of this (or another) process: cgroup quotas of the
           leaf and its ancestors, affinity, GOMAXPROCS, and what cpuwork uses`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return cli.UsageError(err) })
	root.AddCommand(budgetCmd(), benchCmd(), simulateCmd(), runCmd(), doctorCmd(), cli.ExecInCmd())
	return root
}
