package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// `cpuwork bench` runs the bench's own program: under `go run` the
// package from this source tree, otherwise cpuwork-bench beside the
// executable, then on PATH, and with none of them it says how to install
// it.
func TestBenchRunsTheBenchProgram(t *testing.T) {
	tmp := os.TempDir()
	noPath := func(string) (string, error) { return "", exec.ErrNotFound }
	goOnly := func(p string) (string, error) {
		if p == "go" {
			return "/usr/bin/go", nil
		}
		return "", exec.ErrNotFound
	}
	_, build, err := benchCommand(filepath.Join(tmp, "go-build123", "b001", "exe", "cpuwork"), []string{"--quick"}, goOnly)
	if err != nil || !slices.Equal(build, []string{"/usr/bin/go", "build", "-o"}) {
		t.Errorf("under go run: %q, %v", build, err)
	}
	t.Setenv("GOCACHE", "/var/cache/gobuild")
	_, build, err = benchCommand("/var/cache/gobuild/32/325c-d/cpuwork", nil, goOnly)
	if err != nil || build == nil {
		t.Errorf("from go run's cache of binaries: %q, %v", build, err)
	}
	dir := t.TempDir()
	beside := filepath.Join(dir, benchProgram)
	if err := os.WriteFile(beside, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	got, _, err := benchCommand(filepath.Join(dir, "cpuwork"), []string{"-h"}, goOnly)
	if err != nil || !slices.Equal(got, []string{beside, "-h"}) {
		t.Errorf("installed beside: %q, %v", got, err)
	}
	onPath := func(p string) (string, error) {
		if p == benchProgram {
			return "/opt/bin/" + benchProgram, nil
		}
		return "", exec.ErrNotFound
	}
	got, _, err = benchCommand("/usr/local/bin/cpuwork", nil, onPath)
	if err != nil || !slices.Equal(got, []string{"/opt/bin/" + benchProgram}) {
		t.Errorf("on PATH: %q, %v", got, err)
	}
	_, _, err = benchCommand("/usr/local/bin/cpuwork", nil, noPath)
	if err == nil || !strings.Contains(err.Error(), "go install "+benchPackage+"@latest") {
		t.Errorf("none installed: %v, want how to install it", err)
	}
	// A cpuwork-bench that is not executable is not run.
	if err := os.Chmod(beside, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := benchCommand(filepath.Join(dir, "cpuwork"), nil, noPath); err == nil {
		t.Error("a cpuwork-bench without the execute bit was run")
	}
}

// End to end: from this source tree, `cpuwork bench` with a bad flag
// reaches the bench program, which exits 2 as every usage error does.
func TestBenchUsageErrorsExit2ThroughTheBenchProgram(t *testing.T) {
	needSourceTreeBench(t)
	before := benchDirs(t)
	out, err := asMain("bench", "--no-such-flag").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "unknown flag: --no-such-flag") {
		t.Errorf("cpuwork bench --no-such-flag: %v: %s", err, out)
	}
	if after := benchDirs(t); len(after) > len(before) {
		t.Errorf("the bench's build directory is left behind: %v", after)
	}
}

// SIGTERM sent to cpuwork reaches the bench it runs from the source
// tree, which removes its cgroups and exits 128+15; cpuwork exits with
// that status and removes the bench's build directory.
func TestSIGTERMToCpuworkBenchReachesTheBench(t *testing.T) {
	needSourceTreeBench(t)
	before := benchDirs(t)
	cmd, out := startLongBench(t)
	deadline := time.Now().Add(10 * time.Minute) // the bench's first build, on empty caches
	for !strings.Contains(out.String(), "[1/") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond) // the bench has started its first step
	}
	cmd.Process.Signal(syscall.SIGTERM)
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 128+15 || !strings.Contains(out.String(), "removing the bench's cgroups") {
		t.Errorf("cpuwork bench after SIGTERM: %v: %s", err, out.String())
	}
	if after := benchDirs(t); len(after) > len(before) {
		t.Errorf("the bench's build directory is left behind: %v", after)
	}
}

// needSourceTreeBench skips a test that needs `cpuwork bench` to build
// the bench from this source tree: a go command, and a test binary that
// go built (as `go run` builds cpuwork).
func needSourceTreeBench(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to build the bench with")
	}
	if !builtByGoRun(os.Args[0]) {
		t.Skipf("the test binary %s is not in a go-build directory", os.Args[0])
	}
}

// startLongBench starts `cpuwork bench` on a run of 30 s, its output
// gathered in the returned buffer.
func startLongBench(t *testing.T) (*exec.Cmd, *lockedBuffer) {
	t.Helper()
	cmd := asMain("bench", "--no-setup", "--scenario", "timers", "--duration", "30s", "--repeat", "1", "--out", "")
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, out
}

// benchDirs lists the bench's build directories in the temporary
// directory.
func benchDirs(t *testing.T) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(os.TempDir(), "cpuwork-bench-*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// The cpuwork command builds from a package graph with none of the
// bench's workloads: no plotting, load generator, ONNX Runtime, cgo
// compression, HDR histograms or progress bar.
func TestTheCommandNeedsNoneOfTheBenchsModules(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if .Module}}{{.Module.Path}}{{end}}", ".").Output()
	if err != nil {
		t.Fatal(err)
	}
	mods := map[string]bool{}
	for _, m := range strings.Fields(string(out)) {
		if !strings.HasPrefix(m, "github.com/cpuwork/cpuwork") {
			mods[m] = true
		}
	}
	for m := range mods {
		for _, bad := range []string{"gonum.org/v1/plot", "tsenart/vegeta", "yalue/onnxruntime_go", "DataDog/zstd", "klauspost/compress", "HdrHistogram", "progressbar", "golang.org/x/image", "google.golang.org/grpc"} {
			if strings.Contains(m, bad) {
				t.Errorf("the cpuwork command needs %s, a module of the bench", m)
			}
		}
	}
	t.Logf("%d modules: %s", len(mods), strings.Join(slices.Sorted(func(yield func(string) bool) {
		for m := range mods {
			if !yield(m) {
				return
			}
		}
	}), " "))
}

// lockedBuffer is a bytes.Buffer that a command writes while a test
// reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// SIGTERM while `cpuwork bench` builds the bench from the source tree
// stops the build, exits 128+15 and leaves no build directory (it once
// killed cpuwork outright, the build and its directory left behind).
func TestSIGTERMDuringTheBenchsBuildCleansUp(t *testing.T) {
	needSourceTreeBench(t)
	before := benchDirs(t)
	cmd, out := startLongBench(t)
	building := func() bool { // a child of cpuwork (forked by any of its threads) runs the go command
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", cmd.Process.Pid))
		for _, f := range tasks {
			kids, _ := os.ReadFile(f)
			for _, k := range strings.Fields(string(kids)) {
				if c, err := os.ReadFile("/proc/" + k + "/cmdline"); err == nil && strings.Contains(string(c), "build") {
					return true
				}
			}
		}
		return false
	}
	deadline := time.Now().Add(time.Minute)
	for !building() && !strings.Contains(out.String(), "[1/") && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 128+15 {
		t.Errorf("cpuwork bench after SIGTERM during its build: %v: %s", err, out.String())
	}
	if after := benchDirs(t); len(after) > len(before) {
		t.Errorf("the bench's build directory is left behind: %v", after)
	}
}
