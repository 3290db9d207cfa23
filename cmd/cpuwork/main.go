// Command cpuwork measures, diagnoses and inspects CPU-bound Go work.
//
//	cpuwork bench [--quick] [--scenario S] [--out DIR] [--json]   measure every claim
//	cpuwork budget [--json] [--pid N]   the CPU budget and what GOMAXPROCS should be
//	cpuwork run [--cpus 1.5] [--weight N] [--cpuset 0-1] [--idle] -- CMD   run CMD in a new cgroup
//	cpuwork doctor --pid N [--url URL] [--duration 5s] [--json]   diagnose a running process
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	if err := rootCmd().Execute(); err != nil {
		var code exitCode
		if errors.As(err, &code) {
			os.Exit(int(code))
		}
		var usage usageErr
		if errors.As(err, &usage) {
			fmt.Fprintln(os.Stderr, "cpuwork:", err)
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "cpuwork:", err)
		os.Exit(1)
	}
}

func rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "cpuwork",
		Short: "Run CPU-bound Go work at the speed of the cores you really have",
		Long: `cpuwork measures, diagnoses and inspects CPU-bound work in Go services.

  bench    every claim measured side by side on real work, with a report
  run      run a command in a new CPU cgroup and report its throttling
  doctor   diagnose a running process: throttling, GOMAXPROCS above the quota,
           OS starvation, oversubscription, timer starvation, GC pressure
  budget   the CPU budget of this (or another) process: cgroup quotas of the
           leaf and its ancestors, affinity, GOMAXPROCS, and what cpuwork uses`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(budgetCmd(), benchCmd(), runCmd(), doctorCmd(), loadgenCmd(), execInCmd(), quotaChildCmd(), probeCmd(), hogCmd(), inferenceServerCmd(), quotaTimelineCmd())
	return root
}

// usageErr is a usage error: main prints it and exits with status 2.
type usageErr struct{ error }

func (u usageErr) Unwrap() error { return u.error }

// usageError marks err as a usage error (exit status 2).
func usageError(err error) error { return usageErr{err} }
