package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/cpuwork/cpuwork/cgroup"
	"github.com/spf13/cobra"
)

// exitCode asks main to exit with a status after cleanup ran.
type exitCode int

func (e exitCode) Error() string { return "exit status " + strconv.Itoa(int(e)) }

// runReport is what `cpuwork run` prints at exit (--json shape).
type runReport struct {
	Cgroup           string  `json:"cgroup"`
	ExitStatus       int     `json:"exit_status"`
	Signal           string  `json:"signal,omitempty"`
	WallS            float64 `json:"wall_s"`
	CPUS             float64 `json:"cpu_s"`
	Periods          uint64  `json:"periods"`
	ThrottledPeriods uint64  `json:"throttled_periods"`
	ThrottledS       float64 `json:"throttled_s"`
	Removed          bool    `json:"cgroup_removed"`
}

func runCmd() *cobra.Command {
	var (
		cfg    cgroup.Config
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "run [flags] -- CMD [ARGS...]",
		Short: "Run a command in a new CPU cgroup (quota, weight, cpuset, idle) and report throttling",
		Long: `Run CMD in a new cgroup, as systemd-run --scope would: CMD joins the group
before it executes anything. SIGINT, SIGTERM and SIGHUP sent to cpuwork are
forwarded to CMD; cpuwork exits with CMD's exit status (128+N when CMD was
killed by signal N) and removes the cgroup on every path it controls: CMD
exits, CMD is killed (even with SIGKILL), or cpuwork gets SIGINT/SIGTERM
(after forwarding it and waiting for CMD). Processes CMD left in the group
are killed. At exit it prints, on stderr, the CPU time used, the CFS
periods, throttled periods and throttled time (--json: one JSON object).

Needs root or a delegated cgroup subtree; says exactly what is missing
otherwise. CPU amounts are cores (1.5 = 1500m).`,
		Example: `  cpuwork run --cpus 1.25 -- ./myservice --port 8080
  cpuwork run --weight 200 --cpuset 0-1 -- make -j4
  cpuwork run --idle --name batch -- ./reindex`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cfg.Name == "" {
				cfg.Name = "run-" + strconv.Itoa(os.Getpid())
			}
			return runIn(cfg, args, asJSON, cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.SetInterspersed(false) // flags after CMD belong to CMD
	f.Float64Var(&cfg.CPUs, "cpus", 0, "CFS quota in cores (1.5 = 150ms per 100ms period); 0 = no quota")
	f.DurationVar(&cfg.Period, "period", 0, "CFS period (1ms..1s); 0 = 100ms")
	f.Uint64Var(&cfg.Weight, "weight", 0, "cgroup v2 cpu.weight 1..10000 (default 100; converted to shares on v1)")
	f.Uint64Var(&cfg.Shares, "shares", 0, "cgroup v1 cpu.shares 2..262144 (default 1024; converted to weight on v2)")
	f.StringVar(&cfg.Cpuset, "cpuset", "", "CPUs the command may use, e.g. 0-1 or 0,2 (default: inherit)")
	f.BoolVar(&cfg.Idle, "idle", false, "set cpu.idle: the group runs only when other groups leave CPU idle (Linux >= 5.15)")
	f.StringVar(&cfg.Name, "name", "", "cgroup name under cpuwork/ (default run-PID); no '/' or '..'")
	f.BoolVar(&asJSON, "json", false, "print the exit report as JSON on stderr")
	return cmd
}

func runIn(cfg cgroup.Config, args []string, asJSON bool, report io.Writer) error {
	g, err := cgroup.New(cfg)
	if err != nil {
		return err
	}
	rep := runReport{Cgroup: g.Path()}
	exe, err := os.Executable()
	if err != nil {
		g.Remove()
		return err
	}
	stage := append([]string{"exec-in"}, g.ProcsFiles()...)
	child := exec.Command(exe, append(append(stage, "--"), args...)...)
	child.Stdin, child.Stdout, child.Stderr = os.Stdin, os.Stdout, os.Stderr
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	start := time.Now()
	if err := child.Start(); err != nil {
		g.Remove()
		return fmt.Errorf("run: start %s: %w", args[0], err)
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sigs:
				child.Process.Signal(s) // CMD decides; cpuwork waits for it
			case <-done:
				return
			}
		}
	}()
	waitErr := child.Wait()
	close(done)
	rep.WallS = time.Since(start).Seconds()
	var ee *exec.ExitError
	switch {
	case waitErr == nil:
	case errors.As(waitErr, &ee):
		ws := ee.Sys().(syscall.WaitStatus)
		if ws.Signaled() {
			rep.ExitStatus, rep.Signal = 128+int(ws.Signal()), ws.Signal().String()
		} else {
			rep.ExitStatus = ws.ExitStatus()
		}
	default:
		rep.ExitStatus = 1
	}
	if st, err := g.Stat(); err == nil {
		rep.CPUS, rep.Periods, rep.ThrottledPeriods, rep.ThrottledS = st.Usage.Seconds(), st.Periods, st.ThrottledPeriods, st.ThrottledTime.Seconds()
	}
	rmErr := g.Remove()
	rep.Removed = rmErr == nil
	if asJSON {
		json.NewEncoder(report).Encode(rep)
	} else {
		fmt.Fprintf(report, "cpuwork run: %s exited %d%s after %.2fs; CPU %.2fs; %d periods, %d throttled (%.3fs throttled); cgroup %s %s\n",
			args[0], rep.ExitStatus, sigSuffix(rep.Signal), rep.WallS, rep.CPUS, rep.Periods, rep.ThrottledPeriods, rep.ThrottledS, rep.Cgroup, removedWord(rmErr))
	}
	if rmErr != nil {
		fmt.Fprintln(report, "cpuwork run:", rmErr)
	}
	if rep.ExitStatus != 0 {
		return exitCode(rep.ExitStatus)
	}
	return rmErr
}

func sigSuffix(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}

func removedWord(err error) string {
	if err != nil {
		return "NOT removed"
	}
	return "removed"
}

// execInCmd is the hidden first stage of `run`: it joins the cgroup whose
// cgroup.procs file it is given, then replaces itself with CMD.
func execInCmd() *cobra.Command {
	return &cobra.Command{
		Use:                "exec-in PROCS_FILE... -- CMD [ARGS...]",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			dash := -1
			for i, a := range args {
				if a == "--" {
					dash = i
					break
				}
			}
			if dash < 1 || dash == len(args)-1 {
				return errors.New("usage: exec-in PROCS_FILE... -- CMD [ARGS...]")
			}
			for _, f := range args[:dash] {
				if err := os.WriteFile(f, []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
					return fmt.Errorf("join cgroup: %w", err)
				}
			}
			argv := args[dash+1:]
			path, err := exec.LookPath(argv[0])
			if err != nil {
				return err
			}
			return syscall.Exec(path, argv, os.Environ())
		},
	}
}
