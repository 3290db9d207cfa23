package main

import (
	"encoding/json"
	"time"

	"github.com/cpuwork/cpuwork/cmd/cpuwork/internal/doctor"
	"github.com/spf13/cobra"
)

func doctorCmd() *cobra.Command {
	var cfg doctor.Config
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "doctor --pid N [--url http://127.0.0.1:PORT] [--duration 5s] [--json]",
		Short: "Diagnose the CPU scheduling of a running process: findings, evidence and the fix",
		Long: `Observe process N from outside for --duration and report what loses it CPU
or latency, each finding with its evidence and the exact change that fixes it:

  gomaxprocs-above-quota  GOMAXPROCS above the CPU quota of the leaf cgroup or
                          an ancestor (with the throttled periods it causes)
  cpu-throttled           CFS throttling of the cgroup that sets the quota
  os-starvation           threads runnable but waiting for a CPU the kernel gave
                          to another process (/proc/N/task/*/schedstat run delay)
  oversubscribed          many runnable goroutines per P and high scheduling
                          latency (needs --url: the trace or /debug/cpuwork)
  timer-starvation        timers firing late behind busy Ps (needs --url and
                          the target's timer canary)
  gc-pressure             the GC's share of CPU, stop-the-world pauses (--url)
  healthy                 nothing found

With --pid alone it reads /proc/N (same user or root) and the cgroup files.
--url is the base URL of the target's HTTP server: the doctor reads an
execution trace of up to 5 s from its net/http/pprof (/debug/pprof/trace,
parsed with golang.org/x/exp/trace: every goroutine's wait from runnable to
running), a CPU profile of the same length (/debug/pprof/profile: the
scheduler's share, runtime.asyncPreempt apart) and, when it mounts schedstat.Handler at /debug/cpuwork (package
github.com/cpuwork/cpuwork/schedstat), the sampler's last interval.
Exit status: 0 when nothing is at warning or above, 3 when something is,
1 when the doctor itself failed. --json prints {"findings": [{"id",
"severity", "summary", "evidence", "fix"}], "window": {...}, "unread": [...]}.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			res, err := doctor.Run(cfg)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				if err := enc.Encode(res); err != nil {
					return err
				}
			} else {
				res.Text(out)
			}
			if res.Worst() != doctor.Info {
				return exitCode(3)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.PID, "pid", 0, "process to diagnose (required)")
	f.StringVar(&cfg.URL, "url", "", "base URL of the target's HTTP server serving /debug/cpuwork (schedstat.Handler)")
	f.DurationVar(&cfg.Duration, "duration", 5*time.Second, "observation window")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	cmd.MarkFlagRequired("pid")
	return cmd
}
