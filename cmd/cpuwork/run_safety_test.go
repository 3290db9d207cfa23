package main

import (
	"bytes"
	"fmt"
	"github.com/cpuwork/cpuwork/cmd/cpuwork/internal/cli"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/cpuwork/cpuwork/cgroup"
	"golang.org/x/sys/unix"
)

// Regression tests for issue 10: `cpuwork run` on a real host. Each ends by
// checking that no cgroup directory is left that was not there before.

// cgroupDirs lists every directory of every mounted cgroup hierarchy.
func cgroupDirs(t *testing.T) []string {
	t.Helper()
	var out []string
	filepath.WalkDir("/sys/fs/cgroup", func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// runParents are the cgroup parents of this package's tests: `cpuwork
// run`'s default and the ones the tests pass to it or create.
var runParents = []string{"cpuwork", "cpuwork-test-escape", "cpuwork-test-shared", "cpuwork-test-sweep", "cpuwork-test-execin"}

// ranHere reports whether the cgroup directory d is one this package's
// tests make: a parent of runParents, or a run's group (run-PID-START,
// run-test-*). Other packages' tests run at the same time and make
// groups of their own (the root package's cpuwork-test-fraction, ...);
// those are theirs to check.
func ranHere(d string) bool {
	b := filepath.Base(d)
	return strings.HasPrefix(b, "run-") || slices.Contains(runParents, b)
}

// noNewDirs reports the cgroup directories this package's tests make
// (ranHere) that were not there before.
func noNewDirs(t *testing.T, before []string) {
	t.Helper()
	for _, d := range cgroupDirs(t) {
		if ranHere(d) && !slices.Contains(before, d) {
			t.Errorf("left behind: %s", d)
		}
	}
}

func ownCgroup(t *testing.T, controller string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	return cgroupLine(string(b), controller)
}

func cgroupLine(s, controller string) string {
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) == 3 && slices.Contains(strings.Split(f[1], ","), controller) {
			return f[2]
		}
	}
	return ""
}

func needV1(t *testing.T) {
	t.Helper()
	needRoot(t)
	if _, err := os.Stat("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"); err != nil {
		t.Skip("these checks read v1 memberships (memory, pids); this host has no v1 cpu hierarchy")
	}
}

// Defect 1: the command keeps its caller's memory and pids cgroups; only
// its cpu membership changes, to a group below the caller's.
func TestRunKeepsEveryOtherCgroupMembership(t *testing.T) {
	needV1(t)
	before := cgroupDirs(t)
	var stdout, stderr bytes.Buffer
	cmd := cpuworkCmd(t, "memberships", "--cpus", "1", "--", "cat", "/proc/self/cgroup")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v: %s", err, stderr.String())
	}
	for _, c := range []string{"memory", "pids", "blkio", "freezer", "cpuset", "cpuacct"} {
		if own, got := ownCgroup(t, c), cgroupLine(stdout.String(), c); own != got {
			t.Errorf("%s membership changed: %q -> %q", c, own, got)
		}
	}
	want := filepath.Join(ownCgroup(t, "cpu"), "cpuwork", "run-test-memberships")
	if got := cgroupLine(stdout.String(), "cpu"); got != want {
		t.Errorf("cpu membership %q, want %q (below the caller's own)", got, want)
	}
	noNewDirs(t, before)
}

// Defect 2: a second run with the same name is refused and never touches
// the first run's command or group.
func TestRunRefusesANameInUseAndLeavesTheFirstRunAlone(t *testing.T) {
	needRoot(t)
	before := cgroupDirs(t)
	var err1 bytes.Buffer
	first := cpuworkCmd(t, "dup", "--", "sleep", "1")
	first.Stderr = &err1
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !slices.ContainsFunc(cgroupDirs(t), func(d string) bool { return strings.HasSuffix(d, "/run-test-dup") }) {
		if time.Now().After(deadline) {
			t.Fatal("the first run's group never appeared")
		}
		time.Sleep(10 * time.Millisecond)
	}
	out, err := cpuworkCmd(t, "dup", "--", "true").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "exists") {
		t.Fatalf("second run with the same name: err %v, output %s", err, out)
	}
	if err := first.Wait(); err != nil {
		t.Fatalf("first run: %v (stderr %s)", err, err1.String())
	}
	if r := report(t, err1.Bytes()); r.ExitStatus != 0 || !r.Removed {
		t.Errorf("first run's report %+v", r)
	}
	noNewDirs(t, before)
}

// Defect 3: SIGKILL of cpuwork kills the command with it, and the next run
// removes the group the dead run left.
func TestSIGKILLOfRunKillsTheCommandAndTheNextRunSweeps(t *testing.T) {
	needRoot(t)
	before := cgroupDirs(t)
	parent := "cpuwork-test-sweep"
	pidFile := filepath.Join(t.TempDir(), "pid")
	cmd := exec.Command(os.Args[0], "run", "--parent", parent, "--", "sh", "-c", "echo $$ > "+pidFile+"; exec sleep 30")
	cmd.Env = append(os.Environ(), "CPUWORK_AS_MAIN=1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pid int
	deadline := time.Now().Add(10 * time.Second)
	for pid == 0 {
		if b, err := os.ReadFile(pidFile); err == nil {
			pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatal("the command never started")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cmd.Process.Kill() // SIGKILL: cpuwork cannot clean up
	cmd.Wait()
	// Pdeathsig acts in milliseconds; the bound is generous for a loaded CI
	// machine, and the time taken is logged.
	killed := time.Now()
	deadline = killed.Add(3 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("command %d outlived its supervisor by more than 3 s:\n%s", pid, st)
		}
		time.Sleep(time.Millisecond)
	}
	t.Logf("the command was gone %v after its supervisor was killed", time.Since(killed).Round(time.Millisecond))
	left, _ := filepath.Glob("/sys/fs/cgroup/*/" + parent + "/run-*")
	if len(left) == 0 {
		t.Fatal("the dead run left no group: the sweep is not exercised")
	}
	next := exec.Command(os.Args[0], "run", "--parent", parent, "--", "true")
	next.Env = append(os.Environ(), "CPUWORK_AS_MAIN=1")
	out, err := next.CombinedOutput()
	if err != nil {
		t.Fatalf("next run: %v: %s", err, out)
	}
	if !regexp.MustCompile(`left by run PID \d+ \(started at tick \d+\), which is gone`).Match(out) {
		t.Errorf("the next run did not report the sweep: %s", out)
	}
	for _, d := range left {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("%s survived the sweep", d)
		}
	}
	for _, m := range []string{"cpu", "cpuset", "unified", ""} {
		os.Remove(filepath.Join("/sys/fs/cgroup", m, parent)) // the parent existed for both runs: neither removed it
	}
	noNewDirs(t, before)
}

// alive reports whether pid runs: it exists and is not a zombie waiting
// for its new parent (init, or a subreaper) to reap it.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// Defect 4: Ctrl-C on a terminal reaches the command exactly once.
func TestCtrlCOnATerminalReachesTheCommandOnce(t *testing.T) {
	needRoot(t)
	before := cgroupDirs(t)
	master, slave, err := openPTY()
	if err != nil {
		t.Skipf("no pty: %v", err)
	}
	defer master.Close()
	defer slave.Close()
	count := filepath.Join(t.TempDir(), "ints")
	script := `trap 'echo INT >> ` + count + `' INT; i=0; while [ $i -lt 40 ]; do sleep 0.05; i=$((i+1)); done`
	cmd := exec.Command(os.Args[0], "run", "--name", "run-test-ctrlc", "--", "sh", "-c", script)
	cmd.Env = append(os.Environ(), "CPUWORK_AS_MAIN=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { // drain the terminal
		buf := make([]byte, 4096)
		for {
			if _, err := master.Read(buf); err != nil {
				return
			}
		}
	}()
	// Wait until the command's group holds the terminal, then do what the
	// terminal does on Ctrl-C: SIGINT to its foreground process group.
	deadline := time.Now().Add(10 * time.Second)
	var fg int
	for {
		fg, err = unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPGRP)
		if err == nil && fg != cmd.Process.Pid && fg > 0 {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("the command's group never became the foreground group (fg %d, err %v)", fg, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // the trap is set
	syscall.Kill(-fg, syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		t.Fatal("cpuwork run never ended")
	}
	b, _ := os.ReadFile(count)
	if n := strings.Count(string(b), "INT"); n != 1 {
		t.Fatalf("the command saw %d SIGINTs, want exactly 1", n)
	}
	noNewDirs(t, before)
}

// openPTY opens a pseudo-terminal pair (posix_openpt, unlockpt, ptsname).
func openPTY() (master, slave *os.File, err error) {
	master, err = os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, err
	}
	var unlock int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, master.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		master.Close()
		return nil, nil, e
	}
	n, err := unix.IoctlGetUint32(int(master.Fd()), unix.TIOCGPTN)
	if err != nil {
		master.Close()
		return nil, nil, err
	}
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		master.Close()
		return nil, nil, err
	}
	return master, slave, nil
}

// Defect 5: shells' exit statuses for a missing (127) and a
// non-executable (126) command, before any cgroup is made.
func TestRunExitStatusesForMissingAndNonExecutableCommands(t *testing.T) {
	before := cgroupDirs(t)
	dir := t.TempDir()
	noexec := filepath.Join(dir, "script")
	os.WriteFile(noexec, []byte("#!/bin/sh\ntrue\n"), 0o644)
	for cmdline, want := range map[string]int{"/nonexistent/cmd": 127, "no-such-command-here": 127, noexec: 126} {
		c := cpuworkCmd(t, "status", "--", cmdline)
		out, err := c.CombinedOutput()
		if got := exitStatus(err); got != want {
			t.Errorf("%s: exit status %d, want %d (%s)", cmdline, got, want, out)
		}
	}
	noNewDirs(t, before)
}

// Defect 6: the exec-in stage writes only to cgroup files; a regular file
// passed to it is refused and left untouched.
func TestExecInRefusesAFileThatIsNotACgroupFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "victim")
	os.WriteFile(p, []byte("precious\n"), 0o644)
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(os.Args[0], "exec-in", "1", "--", "true")
	cmd.Env = append(os.Environ(), "CPUWORK_AS_MAIN=1")
	cmd.ExtraFiles = []*os.File{f}
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "not a cgroup file") {
		t.Errorf("exec-in with a regular file: err %v, output %s", err, out)
	}
	if b, _ := os.ReadFile(p); string(b) != "precious\n" {
		t.Errorf("the file was changed to %q", b)
	}
	// A path argument, as the old stage took, is not a descriptor count.
	cmd = exec.Command(os.Args[0], "exec-in", p, "--", "true")
	cmd.Env = append(os.Environ(), "CPUWORK_AS_MAIN=1")
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Errorf("exec-in with a path: accepted (%s)", out)
	}
	if b, _ := os.ReadFile(p); string(b) != "precious\n" {
		t.Errorf("the file was changed to %q", b)
	}
}

// Defect 7: a CPU that is not online is refused before anything is made.
func TestRunValidatesTheCpusetFirst(t *testing.T) {
	needRoot(t)
	before := cgroupDirs(t)
	out, err := cpuworkCmd(t, "cpuset", "--cpuset", "977", "--", "true").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "not online") {
		t.Errorf("--cpuset 977: err %v, output %s", err, out)
	}
	noNewDirs(t, before)
}

// A --name of the form run gives its own groups (run-PID-START) is
// refused: the next run would take the group for a dead run's, sweep it
// and kill the command in it.
func TestRunRefusesANameOfTheOwnedForm(t *testing.T) {
	for _, n := range []string{"run-1-2", fmt.Sprintf("run-%d-%d", os.Getpid(), 12345)} {
		err := checkRunConfig(cgroup.Config{Name: n}, false, 2)
		if err == nil || !strings.Contains(err.Error(), "has the form") {
			t.Errorf("--name %s: %v, want a refusal", n, err)
		}
	}
	for _, n := range []string{"run-test-x", "batch", "run-1", "runner-1-2"} {
		if err := checkRunConfig(cgroup.Config{Name: n}, false, 2); err != nil {
			t.Errorf("--name %s refused: %v", n, err)
		}
	}
}

var jsonKeyRE = regexp.MustCompile(`"([^"]+)":`)

// Defect 9: budget --json uses snake_case keys only and [] for empty lists.
func TestBudgetJSONIsSnakeCaseWithEmptyLists(t *testing.T) {
	out, err := run(t, "budget", "--json")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "null") {
		t.Errorf("null in %s", out)
	}
	var keys []string
	for _, m := range jsonKeyRE.FindAllStringSubmatch(out, -1) {
		keys = append(keys, m[1])
	}
	for _, k := range keys {
		if strings.ToLower(k) != k || strings.Contains(k, "-") {
			t.Errorf("key %q is not snake_case", k)
		}
	}
	if len(keys) < 5 {
		t.Errorf("too few keys in %s", out)
	}
}

// The kernel keeps the parent-death signal per thread and clears it for
// every thread a process creates (copy_process), so the exec-in stage's Go
// runtime threads have none. If exec-in's goroutine had migrated off the
// main thread before execve, CMD would inherit no Pdeathsig and outlive a
// SIGKILLed cpuwork (seen as 1 failure in 30 runs of the SIGKILL test).
// cli.LockForExec must leave the calling goroutine on a thread that has it.
func TestExecInThreadCarriesTheParentDeathSignal(t *testing.T) {
	got := make(chan int, 1)
	go func() {
		// A new goroutine locked to a thread: never the process's first
		// thread's inherited signal, whatever thread it lands on.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := unix.Prctl(unix.PR_SET_PDEATHSIG, 0, 0, 0, 0); err != nil {
			t.Error(err)
		}
		if err := cli.LockForExec(os.Getppid()); err != nil {
			t.Error(err)
		}
		var sig int
		if err := unix.Prctl(unix.PR_GET_PDEATHSIG, uintptr(unsafe.Pointer(&sig)), 0, 0, 0); err != nil {
			t.Error(err)
		}
		got <- sig
	}()
	if sig := <-got; sig != int(syscall.SIGKILL) {
		t.Fatalf("the exec-ing thread's parent-death signal is %d, want SIGKILL (%d)", sig, syscall.SIGKILL)
	}
	if err := cli.LockForExec(os.Getppid() + 100000); err == nil {
		t.Error("lockForExec accepted a parent that is not ours")
	}
}

// Other packages' tests make cgroups beside this package's, at the same
// time under `go test ./...`: the check for groups left behind must not
// take theirs for ours (it took the root package's cpuwork-test-fraction
// for a group the SIGKILL test left).
func TestOnlyThisPackagesCgroupsCountAsLeftBehind(t *testing.T) {
	for d, want := range map[string]bool{
		"/sys/fs/cgroup/cpu/cpuwork-test-fraction":                   false,
		"/sys/fs/cgroup/cpu/cpuwork-test-account":                    false,
		"/sys/fs/cgroup/cpu/cpuwork-test-fraction/fraction-test-1-2": false,
		"/sys/fs/cgroup/cpu/cpuwork-test-sweep":                      true,
		"/sys/fs/cgroup/cpu/cpuwork-test-escape/run-123-456":         true,
		"/sys/fs/cgroup/cpu/cpuwork/run-test-dup":                    true,
		"/sys/fs/cgroup/cpu/cpuwork":                                 true,
	} {
		if got := ranHere(d); got != want {
			t.Errorf("ranHere(%s) = %v, want %v", d, got, want)
		}
	}
}

// Every catchable signal sent to cpuwork reaches CMD (a systemd
// ExecReload=kill -USR1 $MAINPID, a SIGUSR2 for log rotation, SIGWINCH),
// and cpuwork goes on supervising it.
func TestRunForwardsEveryCatchableSignal(t *testing.T) {
	needRoot(t)
	before := cgroupDirs(t)
	dir := t.TempDir()
	ready, got := filepath.Join(dir, "ready"), filepath.Join(dir, "got")
	script := `for s in USR1 USR2 WINCH ALRM; do trap "echo $s >> ` + got + `" $s; done; touch ` + ready + `; n=0; while [ $n -lt 200 ] && [ "$(wc -l < ` + got + ` 2>/dev/null || echo 0)" -lt 4 ]; do sleep 0.05; n=$((n+1)); done`
	cmd := cpuworkCmd(t, "signals", "--", "sh", "-c", script)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatal("the command never started")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, s := range []syscall.Signal{syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH, syscall.SIGALRM} {
		cmd.Process.Signal(s)
		time.Sleep(100 * time.Millisecond) // sh runs one trap at a time
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("cpuwork run: %v (stderr %s)", err, stderr.String())
	}
	b, _ := os.ReadFile(got)
	if lines := strings.Fields(string(b)); !slices.Equal(lines, []string{"USR1", "USR2", "WINCH", "ALRM"}) {
		t.Errorf("the command received %v, want USR1 USR2 WINCH ALRM", lines)
	}
	noNewDirs(t, before)
}

// doctor --prove's refusals, as exit statuses: no command (2), a --pid
// beside it (2), a command that exits at once (1).
func TestDoctorProveRefusals(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"doctor", "--prove"}, 2, "needs a command"},
		{[]string{"doctor", "--prove", "--pid", "1", "--", "sleep", "9"}, 2, "not --pid"},
		{[]string{"doctor", "--", "sleep", "9"}, 2, "unexpected arguments"},
		{[]string{"doctor", "--prove", "--", "true"}, 1, "exited before it could be diagnosed"},
	} {
		var stderr bytes.Buffer
		if code := execute(c.args, &stderr); code != c.code || !strings.Contains(stderr.String(), c.msg) {
			t.Errorf("%v: exit %d (%s), want %d and %q", c.args, code, stderr.String(), c.code, c.msg)
		}
	}
}
