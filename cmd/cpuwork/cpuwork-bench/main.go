// Command cpuwork-bench is `cpuwork bench`: it measures cpuwork against
// the best alternative on real work and writes a report. It is a program
// of its own because its workloads need cgo, ONNX Runtime, a load
// generator and a plotting library that the cpuwork command (run, doctor,
// simulate, budget) must not: `cpuwork bench` runs this program, found
// beside the cpuwork executable or on PATH, or built with `go run` when
// cpuwork itself runs from the source tree.
//
//	cpuwork-bench [--quick] [--scenario S] [--out DIR] [--json]
package main

import (
	"io"
	"os"

	"github.com/cpuwork/cpuwork/cmd/cpuwork/internal/cli"
	"github.com/spf13/cobra"
)

func main() {
	os.Exit(execute(os.Args[1:], os.Stderr))
}

// execute runs the bench with args and returns its exit status
// (cli.Execute: 0 success, 2 a usage error, 1 a failure).
func execute(args []string, stderr io.Writer) int { return cli.Execute(rootCmd(), args, stderr) }

// rootCmd is the bench command with the hidden stages it runs itself as
// child processes: the load generator, exec-in (joining a cgroup before
// executing), the quota and neighbour children and the inference server.
func rootCmd() *cobra.Command {
	root := benchCmd()
	root.Use = "cpuwork bench"
	root.SilenceUsage, root.SilenceErrors = true, true
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return cli.UsageError(err) })
	root.AddCommand(loadgenCmd(), cli.ExecInCmd(), quotaChildCmd(), probeCmd(), hogCmd(), inferenceServerCmd(), quotaTimelineCmd(), fleetReplicaCmd())
	return root
}
