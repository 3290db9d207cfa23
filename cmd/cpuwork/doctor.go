package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/cpuwork/cpuwork/cmd/cpuwork/internal/cli"
	"io"
	"net/url"
	"time"

	"github.com/cpuwork/cpuwork/cmd/cpuwork/internal/doctor"
	"github.com/spf13/cobra"
)

// doctorHelp is doctor's long help: the findings, the sources, the exit
// statuses and --prove.
const doctorHelp = `Observe process N from outside for --duration and report what loses it CPU
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
  self-oversubscribed     the process's own threads (GOMAXPROCS, native pools)
                          outnumber its CPUs while it uses its whole budget
  at-capacity             CPU used at the budget for the whole window
  unresponsive            trivial requests to --url not answered in the window
  slow-to-answer          trivial requests to --url answered late (median)
  inconclusive            nothing found, but a source the diagnosis needs
                          could not be read: not healthy, not judged
  nothing-found-os-view   nothing found in the OS view of a Go program whose
                          Go scheduler view was not asked for (no --url)
  healthy                 nothing found, with both views (or not a Go program)

With --pid alone it reads /proc/N (same user or root) and the cgroup files.
--url is the base URL of the target's HTTP server: the doctor reads an
execution trace of up to 5 s from its net/http/pprof (/debug/pprof/trace,
parsed with golang.org/x/exp/trace: every goroutine's wait from runnable to
running), a CPU profile of the same length (/debug/pprof/profile: the
scheduler's share, runtime.asyncPreempt apart) and, when it mounts schedstat.Handler at /debug/cpuwork (package
github.com/cpuwork/cpuwork/schedstat), the sampler's last interval. A
verdict needs Go's view (the trace or /debug/cpuwork); a source the
program does not serve (404) is listed as "not served", not as unread.
Exit status: 0 healthy (nothing found, with the Go view for a Go program);
5 nothing found in the OS view, the Go view not asked for (no --url); 3
something at warning or above; 4 inconclusive (a source the diagnosis
needs could not be read); 2 a usage error (no or a bad --pid, a malformed
--url, a --duration that is not positive); 1 the doctor itself failed
(the process is gone, or its PID was reused during the window). A quantity
that could not be read is "unknown (why)", never 0. --json prints {"findings": [{"id",
"severity", "summary", "evidence", "fix"}], "window": {...}, "unread": [...],
"not_served": [...]}.

--prove -- CMD [ARGS] starts CMD (the program itself, or a command that
execs it) and diagnoses it; where the top finding's fix can be applied
from outside (today: GOMAXPROCS from the CPU budget, added to CMD's
environment), it runs CMD --pairs times as is, as is again (the A/A
control) and fixed, in a shuffled order per round, each for --duration
(default 3s here) after 1 s to settle, and judges each figure with the
bench's three-way rule. The verdict rests on what the program's users
feel: with --load, the load command's p99 and throughput (hey's or
vegeta's summary, or a JSON line with "p99_ms" and "rps"; the command
runs outside CMD's cgroup, in a group of its own with no quota, and gets
CMD's PID in $CPUWORK_TARGET_PID); with --url, the median of trivial
requests. A fix that makes any of them worse is worse. Run delay and the
throttled share and time are printed as the mechanism; without --load
or --url there is no verdict. A fix that needs code (admission,
Checkpoint) is named with the guide, not proved. Exit status: 0 the fix
proved better, or nothing to prove (a healthy program); 5 nothing
found in the OS view without --url (as doctor); 3 a finding
whose fix needs code; 4 the fix not proved better (worse, undecided, or
no verdict without --load or --url); 2 no CMD; 1 CMD exited at once or
could not start.`

// exitOfWorst is doctor's exit status for a diagnosis whose worst finding
// is sev: 0 healthy, 5 nothing found in the OS view alone, 4
// inconclusive, 3 something at warning or above.
func exitOfWorst(sev doctor.Severity) error {
	switch sev {
	case doctor.Info:
		return nil
	case doctor.Partial:
		return cli.ExitCode(5)
	case doctor.Inconclusive:
		return cli.ExitCode(4)
	}
	return cli.ExitCode(3)
}

func doctorCmd() *cobra.Command {
	var cfg doctor.Config
	var asJSON, prove bool
	var load string
	var pairs int
	cmd := &cobra.Command{
		Use:   "doctor --pid N [--url http://127.0.0.1:PORT] [--duration 5s] [--json] | doctor --prove [--load CMD] [--pairs 5] -- CMD [ARGS]",
		Short: "Diagnose the CPU scheduling of a running process: findings, evidence and the fix",
		Long:  doctorHelp,
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if prove {
				return runProve(cmd, cfg, args, load, pairs, asJSON)
			}
			if len(args) > 0 {
				return cli.UsageError(fmt.Errorf("doctor: unexpected arguments %q (a command to prove goes after --prove --)", args))
			}
			if err := checkDoctorFlags(cfg); err != nil {
				return cli.UsageError(fmt.Errorf("doctor: %w", err))
			}
			res, err := doctor.Run(cfg)
			if err != nil {
				return err
			}
			if err := printResult(cmd.OutOrStdout(), res, asJSON); err != nil {
				return err
			}
			return exitOfWorst(res.Worst())
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.PID, "pid", 0, "process to diagnose (required)")
	f.StringVar(&cfg.URL, "url", "", "base URL of the target's HTTP server (http://HOST:PORT): probed with trivial requests; its net/http/pprof and /debug/cpuwork (schedstat.Handler) are read when served")
	f.DurationVar(&cfg.Duration, "duration", 5*time.Second, "observation window (positive); sources get 5 s more to answer")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	f.BoolVar(&prove, "prove", false, "start CMD (after --), diagnose it, and prove the top fix that applies from outside by running CMD as is and fixed, alternated")
	f.StringVar(&load, "load", "", "with --prove: a shell command run during each window, outside the program's cgroup (its PID in $CPUWORK_TARGET_PID); its p99 latency and throughput (hey, vegeta, or a JSON line with p99_ms and rps) are what the verdict rests on")
	f.IntVar(&pairs, "pairs", 5, "with --prove: rounds of as is, as is again and fixed")
	return cmd
}

// runProve is doctor --prove.
func runProve(cmd *cobra.Command, cfg doctor.Config, args []string, load string, pairs int, asJSON bool) error {
	if len(args) == 0 {
		return cli.UsageError(fmt.Errorf("doctor: --prove needs a command: cpuwork doctor --prove -- CMD [ARGS]"))
	}
	if cfg.PID != 0 {
		return cli.UsageError(fmt.Errorf("doctor: --prove starts its own process: give a command, not --pid"))
	}
	if pairs < 2 {
		return cli.UsageError(fmt.Errorf("doctor: --pairs %d: at least 2 (an interval needs two)", pairs))
	}
	if cfg.URL != "" {
		if err := checkDoctorFlags(doctor.Config{PID: 1, URL: cfg.URL, Duration: time.Second}); err != nil {
			return cli.UsageError(fmt.Errorf("doctor: %w", err))
		}
	}
	d := cfg.Duration
	if !cmd.Flags().Changed("duration") {
		d = 3 * time.Second
	}
	if d <= 0 {
		return cli.UsageError(fmt.Errorf("doctor: --duration %v: must be positive", d))
	}
	p, err := doctor.Prove(doctor.ProveConfig{Cmd: args, URL: cfg.URL, Load: load, Duration: d, Pairs: pairs, Progress: cmd.ErrOrStderr()})
	if err != nil {
		return err
	}
	if err := printResult(cmd.OutOrStdout(), p, asJSON); err != nil {
		return err
	}
	switch {
	case p.Fix == nil && p.Diagnosis.Worst() == doctor.Info:
		return nil
	case p.Fix == nil && p.Diagnosis.Worst() == doctor.Partial:
		return cli.ExitCode(5) // as doctor: nothing found in the OS view, the Go view not asked for
	case p.Fix == nil && p.Diagnosis.Worst() == doctor.Inconclusive:
		return cli.ExitCode(4)
	case p.Fix == nil:
		return cli.ExitCode(3)
	case p.Verdict == "better":
		return nil
	}
	return cli.ExitCode(4)
}

// checkDoctorFlags refuses what would otherwise be read as health: a
// --url that is not an http(s) URL with a host, a window that is not
// positive.
func checkDoctorFlags(cfg doctor.Config) error {
	if cfg.PID == 0 {
		return errors.New("--pid is required: the process to diagnose (cpuwork doctor --pid N), or --prove -- CMD to start one")
	}
	if cfg.PID < 0 {
		return fmt.Errorf("--pid %d: must be a process ID", cfg.PID)
	}
	if cfg.Duration <= 0 {
		return fmt.Errorf("--duration %v: must be positive", cfg.Duration)
	}
	if cfg.URL != "" {
		u, err := url.Parse(cfg.URL)
		if err != nil {
			return fmt.Errorf("--url %q: %w", cfg.URL, err)
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("--url %q: want http://HOST:PORT (the target's HTTP server)", cfg.URL)
		}
	}
	return nil
}

// printResult writes r as indented JSON or as its text.
func printResult(out io.Writer, r interface{ Text(io.Writer) }, asJSON bool) error {
	if !asJSON {
		r.Text(out)
		return nil
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
