package doctor

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cpuwork/cpuwork/cgroup"
)

// End-to-end cases of issue 22's "done when", on real processes.

// inQuota starts cmd inside a new cgroup with a quota of q cores and
// returns it; both are removed at the end of the test.
func inQuota(t testing.TB, q float64, cmd *exec.Cmd) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a cgroup with a CPU quota")
	}
	g, err := cgroup.New(cgroup.Config{Name: cgroup.OwnedName("doctor-e2e"), Parent: "cpuwork-doctor-test", CPUs: q})
	if err != nil {
		t.Skipf("cannot create a CPU cgroup here: %v", err)
	}
	startIn(t, g, cmd)
}

// startIn starts cmd in group g; at the test's end cmd is killed, then g
// removed.
func startIn(t testing.TB, g *cgroup.Group, cmd *exec.Cmd) {
	t.Helper()
	t.Cleanup(func() {
		if err := g.Remove(); err != nil {
			t.Error(err)
		}
	})
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := g.Add(cmd.Process.Pid); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() }) // before the group's removal (LIFO)
}

// An idle Go >= 1.25 service under a 1.5-CPU quota, serving
// net/http/pprof: Go's GOMAXPROCS is max(2, ceil(1.5)) = 2 by design;
// nothing is throttled. With --url it is healthy, Go's GOMAXPROCS a note
// after it; without, nothing found in the OS view (the Go view not
// asked for).
func TestAnIdleGoProcessUnderAFractionalQuotaGetsNoWarning(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "DOCTOR_ILL=pprof:0", "GOMAXPROCS=")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	inQuota(t, 1.5, cmd)
	sc := bufio.NewScanner(out)
	sc.Scan()
	addr := sc.Text()
	time.Sleep(200 * time.Millisecond)
	r := diagnoseT(t, Config{PID: cmd.Process.Pid, URL: "http://" + addr})
	if r.Worst() != Info || r.Findings[0].ID != "healthy" {
		t.Errorf("an idle service under 1.5 CPUs, with --url: worst %s, findings %v; want healthy first", r.Worst(), ids(r))
	}
	if f, ok := find(r.Findings, "gomaxprocs-above-quota"); ok && f.Severity != Info {
		t.Errorf("gomaxprocs-above-quota at %s", f.Severity)
	}
	r = diagnoseT(t, Config{PID: cmd.Process.Pid, Duration: time.Second})
	if r.Worst() != Partial || r.Findings[0].ID != "nothing-found-os-view" {
		t.Errorf("without --url: worst %s, findings %v; want nothing-found-os-view", r.Worst(), ids(r))
	}
}

// 5,000 runnable goroutines behind net/http/pprof: the endpoint cannot
// answer within the window, so the doctor must not say healthy.
func TestASaturatedProcessThatCannotAnswerIsNotHealthy(t *testing.T) {
	cmd, addr := start(t, "pprof:5000", "GOMAXPROCS=2")
	r := diagnoseT(t, Config{PID: cmd.Process.Pid, URL: "http://" + addr, Duration: 2 * time.Second})
	got := ids(r)
	if slices.Contains(got, "healthy") || r.Worst() == Info {
		t.Errorf("5,000 runnable goroutines: findings %v (worst %s), want a finding", got, r.Worst())
	}
	if !slices.ContainsFunc(got, func(id string) bool {
		return id == "unresponsive" || id == "slow-to-answer" || id == "at-capacity" || id == "oversubscribed"
	}) {
		t.Errorf("findings %v: want unresponsive, slow-to-answer, at-capacity or oversubscribed", got)
	}
}

// GOMAXPROCS 8 on this machine's CPUs (2 here): the process's own threads
// compete; it is not told that another process takes its CPU.
func TestGOMAXPROCSAboveTheCPUsIsSelfOversubscription(t *testing.T) {
	n := runtime.NumCPU()
	cmd, _ := start(t, fmt.Sprintf("busy:%d", 4*n), fmt.Sprintf("GOMAXPROCS=%d", 4*n))
	r := diagnoseT(t, Config{PID: cmd.Process.Pid, Duration: 2 * time.Second})
	got := ids(r)
	if !slices.Contains(got, "self-oversubscribed") || slices.Contains(got, "os-starvation") {
		t.Errorf("GOMAXPROCS %d busy on %d CPUs: findings %v, want self-oversubscribed and no os-starvation (runnable threads %.1f, CPU %.2f cores)",
			4*n, n, got, r.Window.RunnableThreads, r.Window.CPUCores)
	}
}

// A program the project did not write, not Go: a Python busy loop in a
// half-CPU cgroup is throttled and at capacity; no Go rule applies.
func TestAPythonBusyLoopInAQuotaIsThrottled(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	cmd := exec.Command(py, "-c", "while True: pass")
	inQuota(t, 0.5, cmd)
	time.Sleep(300 * time.Millisecond)
	r := diagnoseT(t, Config{PID: cmd.Process.Pid, Duration: 2500 * time.Millisecond})
	got := ids(r)
	if !slices.Contains(got, "cpu-throttled") || slices.Contains(got, "gomaxprocs-above-quota") {
		t.Errorf("python busy loop in 0.5 CPU: findings %v, want cpu-throttled and no GOMAXPROCS rule (go: %+v)", got, r.Window.Go)
	}
	if r.Window.Go.GoVersion != "" {
		t.Errorf("python3 read as a Go program: %+v", r.Window.Go)
	}
}

// Bad input is a usage error in the CLI; an unreachable URL an unread
// source, and with nothing else found the result is inconclusive.
func TestAnUnreachableURLIsInconclusiveNotHealthy(t *testing.T) {
	cmd, _ := start(t, "light")
	r := diagnoseT(t, Config{PID: cmd.Process.Pid, URL: "http://127.0.0.1:1", Duration: time.Second})
	if got := ids(r); !slices.Equal(got, []string{"inconclusive"}) || r.Worst() != Inconclusive {
		t.Errorf("unreachable --url: findings %v worst %s, want inconclusive", got, r.Worst())
	}
	if !strings.Contains(strings.Join(r.Unread, " "), "127.0.0.1:1") {
		t.Errorf("unread %v", r.Unread)
	}
}

// A PID reused during the window is an error, not a finding built from
// two processes.
func TestAPIDThatExitsDuringTheWindowIsAnError(t *testing.T) {
	cmd, _ := start(t, "light")
	_, err := Run(Config{PID: cmd.Process.Pid, Duration: time.Second, Sleep: func(d time.Duration) {
		cmd.Process.Kill()
		cmd.Wait()
		time.Sleep(d)
	}})
	if err == nil {
		t.Error("a process that exited during the window was diagnosed")
	}
}

// A Go program whose main module says go 1.24, built here with this
// toolchain: its binary carries containermaxprocs=0 in DefaultGODEBUG, so
// its GOMAXPROCS is the CPU count, blind to the quota; the doctor reads
// that from the binary instead of assuming Go 1.25's rule.
func TestAnOlderGoDirectiveGetsThePre125Rule(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	dir := t.TempDir()
	os.WriteFile(dir+"/go.mod", []byte("module old\n\ngo 1.24\n"), 0o644)
	os.WriteFile(dir+"/main.go", []byte("package main\n\nimport \"time\"\n\nfunc main() { time.Sleep(time.Hour) }\n"), 0o644)
	build := exec.Command(goBin, "build", "-o", "old", ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOTOOLCHAIN=local", "GOFLAGS=-mod=mod", "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Skipf("cannot build a go 1.24 module here: %v: %s", err, out)
	}
	cmd := exec.Command(dir + "/old")
	inQuota(t, 1.5, cmd)
	r := diagnoseT(t, Config{PID: cmd.Process.Pid, Duration: time.Second})
	if r.Window.Go.QuotaAware || r.Window.GOMAXPROCS != r.Window.Budget.Affinity {
		t.Errorf("a go 1.24 main module: %+v, GOMAXPROCS %d (%s); want the CPU count %d, blind to the quota",
			r.Window.Go, r.Window.GOMAXPROCS, r.Window.GOMAXPROCSSource, r.Window.Budget.Affinity)
	}
	if !strings.Contains(r.Window.GOMAXPROCSSource, "blind to the quota") {
		t.Errorf("GOMAXPROCS source %q", r.Window.GOMAXPROCSSource)
	}
}

// An executor whose tasks are throttled by a 0.5-CPU quota, accounting
// every task: the doctor reads where their time went from /debug/cpuwork
// and judges throttling by what it added to the Interactive p99.
func TestThrottlingIsJudgedByWhatItAddsToTheExecutorsP99(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "DOCTOR_ILL=executor:4", "GOMAXPROCS=2")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	inQuota(t, 0.5, cmd)
	sc := bufio.NewScanner(out)
	addr := ""
	for sc.Scan() && sc.Text() != "ready" {
		addr = sc.Text()
	}
	time.Sleep(2 * time.Second) // the executor follows its new budget (within 1 s), then accounts tasks
	r := diagnoseT(t, Config{PID: cmd.Process.Pid, URL: "http://" + addr, Duration: 1500 * time.Millisecond})
	f, ok := find(r.Findings, "throttling-impact")
	if !ok || f.Severity == Info {
		t.Fatalf("a throttled executor: findings %v, want throttling-impact at warning or above", ids(r))
	}
	if ex := r.Window.Executor; ex == nil || len(ex.SlowTasks) == 0 {
		t.Errorf("no slowest tasks read from /debug/cpuwork: %+v", ex)
	}
}

// README's service (examples/middleware: the middleware adoption and
// /debug/cpuwork), built and doctored as a newcomer would: idle it is
// healthy; loaded past what it serves the load is named, and no
// finding tells it to adopt the cpuwork executor it runs, nor calls it
// unresponsive because a probe waited for a slot (the probes bypass
// admission). A slow-to-answer finding (probes waiting for a P behind
// the slots' tasks on a machine the test's own load shares) may come
// with it, its fix fitted to a program that runs cpuwork.
func TestREADMEsServiceIsDiagnosedAsRunningCpuwork(t *testing.T) {
	if os.Getenv(faultsEnv) == "" {
		t.Skipf("loads the machine to capacity: alone, with %s=1 (as .ci/run runs it)", faultsEnv)
	}
	bin := filepath.Join(t.TempDir(), "middleware")
	build := exec.Command("go", "build", "-o", bin, "./middleware")
	build.Dir = "../../../../examples"
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(bin, "-addr", addr)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	base := "http://" + addr
	waitUntilServed(t, base+"/debug/cpuwork")
	time.Sleep(1200 * time.Millisecond) // the sampler's first interval
	adopt := func(r *Result) []string {
		var bad []string
		for _, f := range r.Findings {
			if strings.Contains(f.Fix, "a cpuwork.Executor") || f.ID == "unresponsive" {
				bad = append(bad, f.ID+": "+f.Fix)
			}
		}
		return bad
	}
	r := diagnoseT(t, Config{PID: cmd.Process.Pid, URL: base, Duration: 2 * time.Second})
	if r.Findings[0].ID != "healthy" {
		t.Errorf("README's service, idle: findings %v; want healthy", ids(r))
	}
	if bad := adopt(r); len(bad) > 0 {
		t.Errorf("idle: %v", bad)
	}
	loading, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 5 * time.Second}
	for range 6 { // closed loop, 6 at once: over the slots, queued and shed
		wg.Go(func() {
			for loading.Err() == nil {
				// About 0.2 s of CPU a request: the clients cost little beside it.
				if resp, err := client.Get(base + "/hash?rounds=3000"); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		})
	}
	time.Sleep(500 * time.Millisecond) // the slots busy, the queue standing
	r = diagnoseT(t, Config{PID: cmd.Process.Pid, URL: base, Duration: 2 * time.Second})
	stop()
	wg.Wait()
	_, full := find(r.Findings, "at-capacity")
	_, slow := find(r.Findings, "slow-to-answer")
	if r.Findings[0].ID == "healthy" || !full && !slow {
		t.Errorf("README's service, loaded: findings %v; want the load named (at-capacity, or slow-to-answer where the doctor's own work keeps the service under 90 %% of the cores)", ids(r))
	}
	if bad := adopt(r); len(bad) > 0 {
		t.Errorf("loaded: advice for a program without an executor, or unresponsive: %v", bad)
	}
	if !r.Window.Go.Cpuwork {
		t.Error("the binary links cpuwork, and the doctor did not see it")
	}
}

// waitUntilServed polls u until it answers 200, for 10 s at most.
func waitUntilServed(t *testing.T, u string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(u); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s never answered 200", u)
}
