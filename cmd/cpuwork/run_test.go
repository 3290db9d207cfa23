package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cpuwork/cpuwork/cgroup"
)

// TestMain lets the test binary act as the cpuwork binary (run re-executes
// itself for its exec-in stage).
func TestMain(m *testing.M) {
	if os.Getenv("CPUWORK_AS_MAIN") == "1" {
		os.Args = append([]string{"cpuwork"}, os.Args[1:]...)
		main()
		os.Exit(0)
	}
	code := m.Run()
	if left, _ := filepath.Glob("/sys/fs/cgroup/*/cpuwork/run-test-*"); len(left) > 0 {
		os.Stderr.WriteString("cgroups left behind: " + strings.Join(left, " ") + "\n")
		code = 1
	}
	os.Exit(code)
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("cpuwork run needs root (or a delegated cgroup subtree) to create cgroups")
	}
	if _, err := os.Stat("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"); err != nil {
		if _, err2 := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err2 != nil {
			t.Skip("no cgroup CPU controller here")
		}
	}
}

func cpuworkCmd(t *testing.T, name string, args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], append([]string{"run", "--json", "--name", "run-test-" + name}, args...)...)
	cmd.Env = append(os.Environ(), "CPUWORK_AS_MAIN=1")
	return cmd
}

func report(t *testing.T, stderr []byte) runReport {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(string(stderr)), "\n")
	var r runReport
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil {
		t.Fatalf("report %q: %v", stderr, err)
	}
	return r
}

func exitStatus(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err == nil {
		return 0
	}
	return -1
}

func TestRunPassesTheExitStatusAndRemovesTheCgroup(t *testing.T) {
	needRoot(t)
	var stderr bytes.Buffer
	cmd := cpuworkCmd(t, "exit", "--cpus", "0.5", "--", "sh", "-c", "exit 3")
	cmd.Stderr = &stderr
	if got := exitStatus(cmd.Run()); got != 3 {
		t.Fatalf("exit status %d, want 3; stderr %s", got, stderr.String())
	}
	r := report(t, stderr.Bytes())
	if !r.Removed || r.ExitStatus != 3 {
		t.Errorf("report %+v", r)
	}
}

func TestRunReportsThrottlingUnderAQuota(t *testing.T) {
	needRoot(t)
	var stderr bytes.Buffer
	cmd := cpuworkCmd(t, "busy", "--cpus", "0.2", "--", "sh", "-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done")
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v: %s", err, stderr.String())
	}
	r := report(t, stderr.Bytes())
	if r.ThrottledPeriods == 0 || r.CPUS <= 0 {
		t.Errorf("no throttling or CPU recorded: %+v", r)
	}
}

func TestRunReportsAChildKilledBySIGKILL(t *testing.T) {
	needRoot(t)
	var stderr bytes.Buffer
	cmd := cpuworkCmd(t, "sigkill", "--", "sh", "-c", "kill -9 $$")
	cmd.Stderr = &stderr
	if got := exitStatus(cmd.Run()); got != 128+9 {
		t.Fatalf("exit status %d, want 137; stderr %s", got, stderr.String())
	}
	if r := report(t, stderr.Bytes()); !r.Removed || r.Signal == "" {
		t.Errorf("report %+v", r)
	}
}

func TestRunForwardsSIGTERMAndCleansUp(t *testing.T) {
	needRoot(t)
	for _, tt := range []struct {
		name   string
		script string
		want   int
	}{
		{"child traps it", `trap "exit 42" TERM; while :; do sleep 0.05; done`, 42},
		{"child dies of it", `exec sleep 30`, 128 + int(syscall.SIGTERM)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			cmd := cpuworkCmd(t, "sigterm-"+strings.ReplaceAll(tt.name, " ", "-"), "--", "sh", "-c", tt.script)
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(500 * time.Millisecond) // let the child reach its loop
			cmd.Process.Signal(syscall.SIGTERM)
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				if got := exitStatus(err); got != tt.want {
					t.Errorf("exit status %d, want %d; stderr %s", got, tt.want, stderr.String())
				}
			case <-time.After(10 * time.Second):
				cmd.Process.Kill()
				t.Fatal("cpuwork run did not exit after SIGTERM")
			}
			if r := report(t, stderr.Bytes()); !r.Removed {
				t.Errorf("cgroup not removed: %+v", r)
			}
		})
	}
}

func TestRunRejectsBadNamesAndMissingCommand(t *testing.T) {
	for _, args := range [][]string{{"run", "--name", "../x", "--", "true"}, {"run"}} {
		if _, err := run(t, args...); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}

func TestBudgetOfAnotherProcessInAQuotaCgroup(t *testing.T) {
	needRoot(t)
	g, err := cgroup.New(cgroup.Config{Name: "run-test-budget-pid", CPUs: 1.25})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Remove()
	child := exec.Command("sleep", "10")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { child.Process.Kill(); child.Wait() }()
	if err := g.Add(child.Process.Pid); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "budget", "--json", "--pid", strconv.Itoa(child.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	var r budgetReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	// The executor's default: one whole slot and one paced for the
	// quarter, when the runtime's default GOMAXPROCS (2) leaves it a P.
	wantSlots, wantPaced := 1, false
	if min(2, r.Affinity) >= 2 {
		wantSlots, wantPaced = 2, true
	}
	if r.Cores != 1.25 || r.Slots != wantSlots || r.PacedSlot != wantPaced || len(r.Limits) == 0 || !r.Limits[0].Leaf {
		t.Errorf("budget of pid %d: cores %v slots %d (paced %v) limits %+v; want %d slots (paced %v)", child.Process.Pid, r.Cores, r.Slots, r.PacedSlot, r.Limits, wantSlots, wantPaced)
	}
	if r.RuntimeGOMAXPROCS != min(2, r.Affinity) {
		t.Errorf("runtime default %d, want min(2, affinity %d)", r.RuntimeGOMAXPROCS, r.Affinity)
	}
	if r.Affinity >= 2 && !strings.Contains(r.Warning, "throttles") {
		t.Errorf("no throttling warning: %q", r.Warning)
	}
	table, err := run(t, "budget", "--pid", strconv.Itoa(child.Process.Pid))
	if err != nil || !strings.Contains(table, "WARNING") || !strings.Contains(table, "1.25 cores") {
		t.Errorf("table %s (err %v)", table, err)
	}
}
