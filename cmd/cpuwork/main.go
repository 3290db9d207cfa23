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
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
)

func main() {
	os.Exit(execute(os.Args[1:], os.Stderr))
}

// execute runs the CLI with args and returns its exit status, printing a
// failure's message on stderr. The contract (docs/guide.md, "Exit
// statuses"): 0 success; 2 a usage error in every subcommand — flags,
// arguments, values, cobra's own errors included; 1 a failure of the
// command; doctor's 3, 4 and 5 for what it found; and run, whose status is
// CMD's, exits 125 for every failure of its own (usage included), 126 and
// 127 when CMD cannot be run or found, as timeout(1), env(1) and nice(1)
// do.
func execute(args []string, stderr io.Writer) int {
	root := rootCmd()
	root.SetArgs(args)
	c, err := root.ExecuteC()
	if err == nil {
		return 0
	}
	var code exitCode
	if errors.As(err, &code) {
		return int(code)
	}
	fmt.Fprintln(stderr, "cpuwork:", err)
	if c != nil && c.Name() == "run" {
		return 125
	}
	if isUsage(err) {
		return 2
	}
	return 1
}

// isUsage reports whether err is a usage error: one of ours (usageError)
// or one of cobra's about flags, arguments and subcommands.
func isUsage(err error) bool {
	var u usageErr
	if errors.As(err, &u) {
		return true
	}
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "required flag", "accepts ", "requires at least", "flag needs an argument", "invalid argument", "bad flag syntax"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
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
  simulate replay a workload through cpuwork's admission code and the usual
           alternatives on a virtual clock: exact, no machine noise
  budget   the CPU budget of this (or another) process: cgroup quotas of the
           leaf and its ancestors, affinity, GOMAXPROCS, and what cpuwork uses`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError(err) })
	root.AddCommand(budgetCmd(), benchCmd(), simulateCmd(), runCmd(), doctorCmd(), loadgenCmd(), execInCmd(), quotaChildCmd(), probeCmd(), hogCmd(), inferenceServerCmd(), quotaTimelineCmd())
	return root
}

// usageErr is a usage error: main prints it and exits with status 2.
type usageErr struct{ error }

func (u usageErr) Unwrap() error { return u.error }

// usageError marks err as a usage error (exit status 2).
func usageError(err error) error { return usageErr{err} }
