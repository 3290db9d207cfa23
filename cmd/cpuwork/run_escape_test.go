package main

import (
	"bytes"
	"github.com/cpuwork/cpuwork/cmd/cpuwork/internal/cli"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cpuwork/cpuwork/cgroup"
)

// Issue 24: nothing escapes `cpuwork run`, internal commands accept only
// what they are for.

func asMain(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "CPUWORK_AS_MAIN=1")
	return cmd
}

// waitPIDFile waits for a file holding one PID per line.
func waitPIDFile(t *testing.T, p string, n int) []int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(p)
		var pids []int
		for _, f := range strings.Fields(string(b)) {
			if v, err := strconv.Atoi(f); err == nil {
				pids = append(pids, v)
			}
		}
		if len(pids) >= n {
			return pids
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never held %d PIDs: %q", p, n, b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Item 1: a SIGKILLed supervisor's CMD dies (Pdeathsig) but what CMD
// forked does not; the next run's sweep kills it and removes the group,
// and says so. Item 2: the parent the dead run created is removed once the
// next run leaves it empty.
func TestSIGKILLOfRunLeavesNoDescendantAfterTheNextRunsSweep(t *testing.T) {
	needRoot(t)
	before := cgroupDirs(t)
	parent := "cpuwork-test-escape"
	pids := filepath.Join(t.TempDir(), "pids")
	first := asMain("run", "--parent", parent, "--", "sh", "-c", "sleep 100 & echo $! >> "+pids+"; sleep 100 & echo $! >> "+pids+"; wait")
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	sleeps := waitPIDFile(t, pids, 2)
	defer func() {
		for _, p := range sleeps {
			syscall.Kill(p, syscall.SIGKILL)
		}
	}()
	first.Process.Kill() // SIGKILL: the supervisor cannot clean up
	first.Wait()
	time.Sleep(200 * time.Millisecond) // Pdeathsig takes sh
	for _, p := range sleeps {
		if !alive(p) {
			t.Fatalf("the forked sleep %d died with its supervisor: the case this test checks did not arise", p)
		}
	}
	left, _ := filepath.Glob("/sys/fs/cgroup/*/" + parent + "/run-*")
	if len(left) == 0 {
		t.Fatal("the dead run left no group")
	}
	out, err := asMain("run", "--parent", parent, "--", "true").CombinedOutput()
	if err != nil {
		t.Fatalf("next run: %v: %s", err, out)
	}
	if !regexp.MustCompile(`, which is gone, killing 2 processes`).Match(out) {
		t.Errorf("the next run did not report what it killed: %s", out)
	}
	for _, p := range sleeps {
		deadline := time.Now().Add(2 * time.Second)
		for alive(p) && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if alive(p) {
			t.Errorf("the forked sleep %d escaped the sweep", p)
		}
	}
	for _, d := range left {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("%s survived the sweep", d)
		}
	}
	// The parent was created by the dead run: the next run, the last one
	// out, removes it.
	if ps, _ := filepath.Glob("/sys/fs/cgroup/*/" + parent); len(ps) > 0 {
		t.Errorf("empty parent left: %v", ps)
		for _, p := range ps {
			os.Remove(p)
		}
	}
	noNewDirs(t, before)
}

// Item 2: a parent shared by runs that end in another order than they
// started is removed by the last one out, even when it did not create it.
func TestASharedParentIsRemovedByTheLastRunOut(t *testing.T) {
	needRoot(t)
	before := cgroupDirs(t)
	parent := "cpuwork-test-shared"
	// The first run creates the parent and ends first; the others find it.
	first := asMain("run", "--parent", parent, "--", "sleep", "0.3")
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if ps, _ := filepath.Glob("/sys/fs/cgroup/*/" + parent + "/run-*"); len(ps) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first run's group never appeared")
		}
		time.Sleep(5 * time.Millisecond)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if out, err := asMain("run", "--parent", parent, "--", "sleep", strconv.FormatFloat(0.5+0.05*float64(i), 'f', 2, 64)).CombinedOutput(); err != nil {
				errs <- &runError{err, out}
			}
		}()
	}
	if err := first.Wait(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if ps, _ := filepath.Glob("/sys/fs/cgroup/*/" + parent); len(ps) > 0 {
		t.Errorf("empty shared parent left after every run ended: %v", ps)
		for _, p := range ps {
			os.Remove(p)
		}
	}
	noNewDirs(t, before)
}

type runError struct {
	err error
	out []byte
}

func (e *runError) Error() string { return e.err.Error() + ": " + string(e.out) }

// Item 3: exec-in writes its PID only to cgroup.procs or tasks. Handed a
// group's cpu.shares (a cgroup file, so the filesystem check alone let it
// through), it refuses and the limit is unchanged; handed fewer
// descriptors than it was told, it joins nothing.
func TestExecInWritesOnlyToMembershipFiles(t *testing.T) {
	needV1(t)
	g, err := cgroup.New(cgroup.Config{Name: cgroup.OwnedName("exec-in-test"), Parent: "cpuwork-test-execin", Shares: 512})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Remove()
	shares := filepath.Join(g.Dir(), "cpu.shares")
	f, err := os.OpenFile(shares, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := asMain("exec-in", "1", "--", "true")
	cmd.ExtraFiles = []*os.File{f}
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "not a cgroup.procs or tasks file") {
		t.Errorf("exec-in with cpu.shares: err %v, output %s", err, out)
	}
	if b, _ := os.ReadFile(shares); strings.TrimSpace(string(b)) != "512" {
		t.Errorf("cpu.shares changed to %q", b)
	}
	// A count above the descriptors handed over: nothing is joined (the
	// child would otherwise run in the group; its CPU would show there).
	procs, err := os.OpenFile(g.ProcsFile(), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer procs.Close()
	cmd = asMain("exec-in", "2", "--", "true")
	cmd.ExtraFiles = []*os.File{procs}
	out, err = cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "joined nothing") {
		t.Errorf("exec-in 2 with one descriptor: err %v, output %s", err, out)
	}
	if b, err := os.ReadFile(filepath.Join(g.Dir(), "cpuacct.usage")); err == nil && strings.TrimSpace(string(b)) != "0" {
		t.Errorf("the child ran in the group before refusing (cpuacct.usage %s)", bytes.TrimSpace(b))
	}
}

// Item 5: the supervisor's PID variable stays out of CMD's environment;
// a --cpus above the host's CPUs is refused unless forced.
func TestRunKeepsItsOwnVariableOutOfCMDAndRefusesQuotasAboveTheHost(t *testing.T) {
	needRoot(t)
	before := cgroupDirs(t)
	var stdout, stderr bytes.Buffer
	cmd := cpuworkCmd(t, "env", "--", "env")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v: %s", err, stderr.String())
	}
	if strings.Contains(stdout.String(), cli.ParentEnv) {
		t.Errorf("%s leaked into CMD's environment", cli.ParentEnv)
	}
	out, err := cpuworkCmd(t, "above", "--cpus", "1000", "--", "true").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "limits nothing") {
		t.Errorf("--cpus 1000 on this host: err %v, output %s", err, out)
	}
	if out, err := cpuworkCmd(t, "forced", "--cpus", "1000", "--force-cpus", "--", "true").CombinedOutput(); err != nil {
		t.Errorf("--cpus 1000 --force-cpus: %v: %s", err, out)
	}
	noNewDirs(t, before)
}
