package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/cpuwork/cpuwork/cmd/cpuwork/internal/cli"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/cpuwork/cpuwork/cgroup"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

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

// runFlags are run's flags as parsed.
type runFlags struct {
	cfg       cgroup.Config
	asJSON    bool
	forceCPUs bool
}

func runCmd() *cobra.Command {
	cmd, _ := runCommand()
	return cmd
}

// runCommand returns the run command and the flags it parses into.
func runCommand() (*cobra.Command, *runFlags) {
	fl := &runFlags{}
	cfg, asJSON, forceCPUs := &fl.cfg, &fl.asJSON, &fl.forceCPUs
	cmd := &cobra.Command{
		Use:   "run [flags] -- CMD [ARGS...]",
		Short: "Run a command in a new CPU cgroup (quota, weight, cpuset, idle) and report throttling",
		Long: `Run CMD in a new cgroup, as systemd-run --scope would: CMD joins the group
before it executes anything.

What is created where: one group, by default cpuwork/run-PID-START below
cpuwork's own cgroup (--parent to change), in the cpu hierarchy only (v1,
with cpuacct where the two are mounted together; plus the cpuset hierarchy
with --cpuset) or in the unified hierarchy (v2). What is kept: every other
membership of the caller (memory, pids, systemd's unit, ...), so CMD stays
inside every limit that applied to cpuwork. A group that exists already is
refused (--name given twice never adopts the other run's group).

Signals: CMD runs in a process group of its own; with a terminal, that
group is the terminal's foreground group, so Ctrl-C reaches CMD once, from
the terminal. Every catchable signal sent to cpuwork itself is forwarded to
CMD (SIGTERM, SIGHUP, SIGUSR1 for a reload, ...), except SIGCHLD, SIGPIPE,
SIGTTIN, SIGTTOU, SIGURG and SIGPROF (cpuwork's own, or the Go runtime's). cpuwork exits with CMD's exit status (128+N when CMD was
killed by signal N; 127 when CMD is not found, 126 when it cannot be
executed) and removes the group on every path it controls, killing
processes CMD left in it. If cpuwork itself is killed (SIGKILL), CMD is
killed with it (Pdeathsig) and the next cpuwork run removes the group.
At exit it prints, on stderr, the CPU time used, the CFS periods,
throttled periods and throttled time (--json: one JSON object).

Needs root or a delegated cgroup subtree; says exactly what is missing
otherwise. Where systemd is PID 1, systemd-run --scope -p CPUQuota=125%
CMD is the alternative without a supervising process. CPU amounts are
cores (1.5 = 1500m).`,
		Example: `  cpuwork run --cpus 1.25 -- ./myservice --port 8080
  cpuwork run --weight 200 --cpuset 0-1 -- make -j4
  cpuwork run --idle --name batch -- ./reindex`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkRunConfig(*cfg, *forceCPUs, runtime.NumCPU()); err != nil {
				return err
			}
			return runIn(*cfg, args, *asJSON, cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.SetInterspersed(false) // flags after CMD belong to CMD
	f.Float64Var(&cfg.CPUs, "cpus", 0, "CFS quota in cores (1.5 = 150ms per 100ms period); 0 = no quota")
	f.DurationVar(&cfg.Period, "period", 0, "CFS period (1ms..1s); 0 = 100ms")
	f.Uint64Var(&cfg.Weight, "weight", 0, "cgroup v2 cpu.weight 1..10000 (default 100; converted to shares on v1)")
	f.Uint64Var(&cfg.Shares, "shares", 0, "cgroup v1 cpu.shares 2..262144 (default 1024; converted to weight on v2)")
	f.StringVar(&cfg.Cpuset, "cpuset", "", "CPUs the command may use, e.g. 0-1 or 0,2; each must be online (default: inherit)")
	f.BoolVar(&cfg.Idle, "idle", false, "set cpu.idle: the group runs only when other groups leave CPU idle (Linux >= 5.15)")
	f.StringVar(&cfg.Name, "name", "", "group name (default run-PID-START); refused if it exists, if it has the default's form, or holds '/' or '..'")
	f.StringVar(&cfg.Parent, "parent", "", "parent of the group: relative to cpuwork's own cgroup (default cpuwork), or from the hierarchy root when it starts with '/'")
	f.BoolVar(asJSON, "json", false, "print the exit report as JSON on stderr")
	f.BoolVar(forceCPUs, "force-cpus", false, "accept a --cpus above the host's CPU count (otherwise refused: such a quota limits nothing)")
	return cmd, fl
}

// checkRunConfig validates run's flags before anything is created: the
// cgroup Config (cgroup.Config.Validate) and a --cpus above the host's
// hostCPUs, which limits nothing and is refused unless forced.
func checkRunConfig(cfg cgroup.Config, force bool, hostCPUs int) error {
	if cgroup.IsOwnedName(runPrefix, cfg.Name) {
		return fmt.Errorf("run: --name %s has the form of the names run gives its own groups (%s-PID-START): refused, so that no run takes it for a dead run's group; choose another name", cfg.Name, runPrefix)
	}
	if cfg.Name == "" {
		cfg.Name = runPrefix + "-0-0" // the default name is made later; its form is valid
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("run: %w", err)
	}
	if cfg.CPUs > float64(hostCPUs) && !force {
		return fmt.Errorf("run: --cpus %g is more than the %d CPUs this host has: it limits nothing (pass --force-cpus to set it anyway, e.g. for a host that will grow)", cfg.CPUs, hostCPUs)
	}
	return nil
}

// runPrefix names the groups `cpuwork run` creates by default (with the
// owner's PID and start time, so dead runs' groups can be swept).
const runPrefix = "run"

// runIn runs the command args in a CPU cgroup made of cfg (first sweeping
// the groups of dead runs), forwards the signals cpuwork receives to it,
// removes the cgroup when it ends and reports the run to report. Its
// error is the command's exit status as a cli.ExitCode (127: not found,
// 126: not executable), else the group's removal's error.
func runIn(cfg cgroup.Config, args []string, asJSON bool, report io.Writer) error {
	if _, err := exec.LookPath(args[0]); err != nil {
		fmt.Fprintf(report, "cpuwork run: %v\n", err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			return cli.ExitCode(127)
		}
		return cli.ExitCode(126)
	}
	sweepDeadRuns(cfg.Parent, report)
	if cfg.Name == "" {
		cfg.Name = cgroup.OwnedName(runPrefix)
	}
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
	// The child joins the group through open cgroup.procs files (never a
	// path it could be talked into writing elsewhere), checks that cpuwork
	// is still its parent, then executes CMD.
	files, err := g.OpenProcs()
	if err != nil {
		g.Remove()
		return err
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	child := exec.Command(exe, append([]string{"exec-in", strconv.Itoa(len(files)), "--"}, args...)...)
	child.Stdin, child.Stdout, child.Stderr = os.Stdin, os.Stdout, os.Stderr
	child.ExtraFiles = files
	child.Env = append(os.Environ(), cli.ParentEnv+"="+strconv.Itoa(os.Getpid()))
	// CMD dies with cpuwork (Pdeathsig). The kernel sends it when the
	// thread that forked exits: keep this goroutine on that thread until
	// CMD is reaped.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	child.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	tty := foregroundTTY()
	if tty {
		// CMD's process group becomes the terminal's foreground group: the
		// terminal's SIGINT/SIGQUIT/SIGTSTP reach CMD, once, and not cpuwork.
		child.SysProcAttr.Foreground, child.SysProcAttr.Ctty = true, 0
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, forwarded()...)
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
				child.Process.Signal(s) // sent to cpuwork itself: CMD decides; cpuwork waits for it
			case <-done:
				return
			}
		}
	}()
	waitErr := child.Wait()
	close(done)
	if tty {
		takeTerminalBack()
	}
	rep.WallS = time.Since(start).Seconds()
	rep.ExitStatus, rep.Signal = exitOf(waitErr)
	if st, err := g.Stat(); err == nil {
		rep.CPUS, rep.Periods, rep.ThrottledPeriods, rep.ThrottledS = st.Usage.Seconds(), st.Periods, st.ThrottledPeriods, st.ThrottledTime.Seconds()
	}
	if rep.CPUS == 0 && child.ProcessState != nil { // no cgroup CPU accounting here: CMD's own rusage
		rep.CPUS = (child.ProcessState.UserTime() + child.ProcessState.SystemTime()).Seconds()
	}
	rmErr := g.Remove()
	rep.Removed = rmErr == nil
	rep.print(report, args[0], asJSON, rmErr)
	if rep.ExitStatus != 0 {
		return cli.ExitCode(rep.ExitStatus)
	}
	return rmErr
}

// sweepDeadRuns removes the groups under parent of runs that died
// without cleaning up (SIGKILL): their owner is gone; what CMD forked may
// still run there, and is killed. Each is reported.
func sweepDeadRuns(parent string, report io.Writer) {
	for _, sw := range cgroup.SweepOwned(parent, runPrefix) {
		killed := ""
		if len(sw.Killed) > 0 {
			killed = fmt.Sprintf(", killing %d processes left in it %v", len(sw.Killed), sw.Killed)
		}
		fmt.Fprintf(report, "cpuwork run: removed %s, left by run PID %d (started at tick %d), which is gone%s\n", sw.Dir, sw.OwnerPID, sw.OwnerStart, killed)
	}
}

// exitOf is the exit status a shell gives CMD's end (waitErr: its Wait's
// error): its own, or 128 plus the signal that killed it (named), or 1
// when it could not be waited for.
func exitOf(waitErr error) (status int, signal string) {
	var ee *exec.ExitError
	switch {
	case waitErr == nil:
		return 0, ""
	case errors.As(waitErr, &ee):
		ws := ee.Sys().(syscall.WaitStatus)
		if ws.Signaled() {
			return 128 + int(ws.Signal()), ws.Signal().String()
		}
		return ws.ExitStatus(), ""
	default:
		return 1, ""
	}
}

// print writes the run's report for cmd to w: a JSON line, or one line
// of text; then rmErr, the group's removal's error, if any.
func (rep runReport) print(w io.Writer, cmd string, asJSON bool, rmErr error) {
	if asJSON {
		json.NewEncoder(w).Encode(rep)
	} else {
		fmt.Fprintf(w, "cpuwork run: %s exited %d%s after %.2fs; CPU %.2fs; %d periods, %d throttled (%.3fs throttled); cgroup %s %s\n",
			cmd, rep.ExitStatus, sigSuffix(rep.Signal), rep.WallS, rep.CPUS, rep.Periods, rep.ThrottledPeriods, rep.ThrottledS, rep.Cgroup, removedWord(rmErr))
	}
	if rmErr != nil {
		fmt.Fprintln(w, "cpuwork run:", rmErr)
	}
}

// notForwarded are the catchable signals cpuwork keeps: SIGCHLD (its
// own child's), SIGURG and SIGPROF (the Go runtime's preemption and
// profiling), SIGPIPE (a closed output), SIGTTIN and SIGTTOU (job
// control of cpuwork itself), and the synchronous faults.
var notForwarded = []syscall.Signal{syscall.SIGCHLD, syscall.SIGURG, syscall.SIGPROF, syscall.SIGPIPE,
	syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGSEGV, syscall.SIGBUS, syscall.SIGFPE, syscall.SIGILL,
	syscall.SIGTRAP, syscall.SIGSYS, syscall.SIGKILL, syscall.SIGSTOP}

// forwarded lists the signals cpuwork run forwards to CMD: every signal
// from 1 to SIGRTMAX but notForwarded and the two the C library keeps
// for its threads (32 and 33).
func forwarded() []os.Signal {
	var out []os.Signal
	for s := syscall.Signal(1); s <= 64; s++ {
		if s == 32 || s == 33 || slices.Contains(notForwarded, s) {
			continue
		}
		out = append(out, s)
	}
	return out
}

// foregroundTTY reports whether standard input is a terminal whose
// foreground process group is cpuwork's own.
func foregroundTTY() bool {
	pgrp, err := unix.IoctlGetInt(0, unix.TIOCGPGRP)
	return err == nil && pgrp == syscall.Getpgrp()
}

// takeTerminalBack makes cpuwork's process group the terminal's
// foreground group again. cpuwork is in the background when it calls
// tcsetpgrp, which would stop it with SIGTTOU unless ignored.
func takeTerminalBack() {
	signal.Ignore(syscall.SIGTTOU)
	defer signal.Reset(syscall.SIGTTOU)
	unix.IoctlSetPointerInt(0, unix.TIOCSPGRP, syscall.Getpgrp())
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
