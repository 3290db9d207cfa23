//go:build linux

package cgroup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cpuwork/cpuwork/osthread"
	"golang.org/x/sys/unix"
)

// TestMain fails the run if any cgroup created by the tests remains.
func TestMain(m *testing.M) {
	code := m.Run()
	if left := leftovers(); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "cgroups left behind by the tests: %v\n", left)
		code = 1
	}
	os.Exit(code)
}

const testPrefix = "cpuwork-test-"

// testParent holds this package's groups. A parent of their own: other
// packages' tests (cpuwork run's) run at the same time in other processes
// and use the default parent "cpuwork"; a parent one process creates and
// another still uses when the first removes its group is left behind by
// both (New removes only the parents it created).
const testParent = "cpuwork-test-cgroup"

// leftovers lists this package's groups and their parent, which Remove
// must have removed with the last group.
func leftovers() []string {
	var out []string
	for _, pattern := range []string{"/sys/fs/cgroup/*/" + testParent, "/sys/fs/cgroup/" + testParent, "/sys/fs/cgroup/*/cpuwork/" + testPrefix + "*"} {
		m, _ := filepath.Glob(pattern)
		out = append(out, m...)
	}
	return out
}

func need(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create cgroups")
	}
	if err := checkWritable(); err != nil {
		t.Skipf("cgroupfs not writable: %v", err)
	}
}

// needThreadMoves skips unless single threads can be moved between groups
// (cgroup v1; v2 needs a threaded subtree this package does not set up).
func needThreadMoves(t *testing.T) {
	t.Helper()
	need(t)
	if Version() != 1 {
		t.Skip("single-thread moves need a threaded v2 subtree")
	}
}

func name(t *testing.T) string {
	return fmt.Sprintf("%s%d-%s", testPrefix, os.Getpid(), strings.ReplaceAll(t.Name(), "/", "_"))
}

func TestInvalidConfigsAreErrors(t *testing.T) {
	for _, c := range []Config{
		{Name: ""}, {Name: "a/b"}, {Name: ".."}, {Name: "x..y"}, {Name: "ok", Parent: "../etc"},
		{Name: "ok", CPUs: -1}, {Name: "ok", Weight: 5, Shares: 5}, {Name: "ok", Weight: 20000},
		{Name: "ok", Shares: 1}, {Name: "ok", Period: time.Hour}, {Name: "ok", CPUs: 0.001},
	} {
		if g, err := New(c); err == nil {
			g.Remove()
			t.Errorf("%+v accepted", c)
		}
	}
}

func TestQuotaWeightAndStatOnARealCgroup(t *testing.T) {
	need(t)
	g, err := New(Config{Name: name(t), Parent: testParent, CPUs: 0.25, Weight: 200})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := g.Remove(); err != nil {
			t.Error(err)
		}
	}()
	dir := g.Dir()
	if Version() == 1 {
		q, _ := os.ReadFile(filepath.Join(dir, "cpu.cfs_quota_us"))
		s, _ := os.ReadFile(filepath.Join(dir, "cpu.shares"))
		if strings.TrimSpace(string(q)) != "25000" || strings.TrimSpace(string(s)) != fmt.Sprint(WeightToShares(200)) {
			t.Errorf("quota %q shares %q", q, s)
		}
	} else {
		m, _ := os.ReadFile(filepath.Join(dir, "cpu.max"))
		if strings.TrimSpace(string(m)) != "25000 100000" {
			t.Errorf("cpu.max %q", m)
		}
	}
	// A busy child under 0.25 CPU gets throttled.
	cmd := exec.Command("/bin/sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := g.Add(cmd.Process.Pid); err != nil {
		cmd.Process.Kill()
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	st, err := g.Stat()
	cmd.Process.Kill()
	cmd.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if st.Periods == 0 || st.ThrottledPeriods == 0 || st.ThrottledTime == 0 {
		t.Errorf("no throttling recorded under 0.25 CPU: %+v", st)
	}
	if st.Usage > 400*time.Millisecond {
		t.Errorf("used %v of CPU in 0.5 s under a 0.25-core quota", st.Usage)
	}
}

// sleepIn starts a sleep in g and returns it (killed when the test ends,
// if it still runs).
func sleepIn(t *testing.T, g *Group) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go cmd.Wait()
	t.Cleanup(func() { cmd.Process.Kill() })
	if err := g.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	return cmd
}

func TestRemoveKillsWhatIsLeft(t *testing.T) {
	need(t)
	g, err := New(Config{Name: name(t), Parent: testParent})
	if err != nil {
		t.Fatal(err)
	}
	sleepIn(t, g)
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(g.Dir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s still exists: %v", g.Dir(), err)
	}
}

func TestIdleAndCpuset(t *testing.T) {
	need(t)
	g, err := New(Config{Name: name(t), Parent: testParent, Idle: true, Cpuset: "0"})
	if errors.Is(err, ErrUnsupported) {
		t.Skipf("cpu.idle or cpuset unsupported here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer g.Remove()
	if b, err := os.ReadFile(filepath.Join(g.Dir(), "cpu.idle")); err != nil || strings.TrimSpace(string(b)) != "1" {
		t.Errorf("cpu.idle %q %v", b, err)
	}
}

func TestAddThreadOnV1(t *testing.T) {
	needThreadMoves(t)
	g, err := New(Config{Name: name(t), Parent: testParent})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Remove()
	cmd := exec.Command("sleep", "5")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	if err := g.AddThread(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(g.Dir(), "tasks"))
	if !strings.Contains(string(b), fmt.Sprint(cmd.Process.Pid)) {
		t.Errorf("tasks %q lacks %d", b, cmd.Process.Pid)
	}
}

func TestWeightToShares(t *testing.T) {
	for w, s := range map[uint64]uint64{1: 2, 100: 2597, 10000: 262144} {
		if got := WeightToShares(w); got != s {
			t.Errorf("WeightToShares(%d) = %d, want %d", w, got, s)
		}
	}
}

// TestLaneThreadsPlacedInACgroup puts an osthread lane's threads into a v1
// cgroup through the Place hook and finds them in its tasks file.
func TestLaneThreadsPlacedInACgroup(t *testing.T) {
	needThreadMoves(t)
	g, err := New(Config{Name: name(t), Parent: testParent, CPUs: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Remove()
	l, err := osthread.Start(osthread.Options{Threads: 2, Sched: osthread.Demoted, Place: g.AddThread})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(g.Dir(), "tasks"))
	for _, tid := range l.TIDs() {
		if !strings.Contains(" "+strings.Join(strings.Fields(string(b)), " ")+" ", fmt.Sprintf(" %d ", tid)) {
			t.Errorf("lane thread %d not in %s/tasks: %q", tid, g.Dir(), b)
		}
	}
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestRemoveNeverKillsTheCallingProcess: one of this process's own threads
// is in the group when Remove runs (as lane threads can be while they exit).
// Remove must move it out, not SIGKILL its own process.
func TestRemoveNeverKillsTheCallingProcess(t *testing.T) {
	needThreadMoves(t)
	g, err := New(Config{Name: name(t), Parent: testParent})
	if err != nil {
		t.Fatal(err)
	}
	moved := make(chan error)
	release := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // exits locked: the thread is discarded afterwards
		moved <- g.AddThread(unix.Gettid())
		<-release
	}()
	if err := <-moved; err != nil {
		t.Fatal(err)
	}
	if err := g.Remove(); err != nil { // the test process must still be alive after this
		t.Fatal(err)
	}
	close(release)
	<-done
	if _, err := os.Stat(g.Dir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s still exists: %v", g.Dir(), err)
	}
}

// SetCPUs changes the quota New applied, raises one below the kernel's
// least to it, lifts it with 0 and refuses a negative one.
func TestSetCPUsOnARealCgroup(t *testing.T) {
	need(t)
	g, err := New(Config{Name: name(t), Parent: testParent, CPUs: 0.25, Period: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := g.Remove(); err != nil {
			t.Error(err)
		}
	}()
	quota := func() string {
		if Version() == 1 {
			q, _ := os.ReadFile(filepath.Join(g.Dir(), "cpu.cfs_quota_us"))
			return strings.TrimSpace(string(q))
		}
		m, _ := os.ReadFile(filepath.Join(g.Dir(), "cpu.max"))
		q, _, _ := strings.Cut(strings.TrimSpace(string(m)), " ")
		return q
	}
	for _, c := range []struct {
		cores float64
		want  string
	}{{0.5, "5000"}, {0.01, "1000"}, {1.25, "12500"}} {
		if err := g.SetCPUs(c.cores); err != nil {
			t.Fatal(err)
		}
		if got := quota(); got != c.want {
			t.Errorf("SetCPUs(%v): quota %s, want %s", c.cores, got, c.want)
		}
	}
	if err := g.SetCPUs(0); err != nil {
		t.Fatal(err)
	}
	if got := quota(); got != "-1" && got != "max" {
		t.Errorf("SetCPUs(0): quota %s, want none", got)
	}
	if err := g.SetCPUs(-1); err == nil {
		t.Error("SetCPUs(-1) accepted")
	}
}
