package workload

import (
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"
)

func source(t *testing.T) *Source {
	t.Helper()
	src, err := NewSource()
	if err != nil {
		t.Skipf("no GOROOT source here: %v", err)
	}
	return src
}

func TestEveryWorkloadRunsAndChecksItsOutput(t *testing.T) {
	src := source(t)
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			w, err := New(name, src)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				if err := w.Run(i); err != nil {
					t.Fatalf("item %d: %v", i, err)
				}
			}
		})
	}
}

func TestBrokenWorkloadsReportErrors(t *testing.T) {
	src := source(t)
	h, err := newHash(src)
	if err != nil {
		t.Fatal(err)
	}
	h.(*hashWL).sums[0][0] ^= 1
	if err := h.Run(0); err == nil || !strings.Contains(err.Error(), "digest") {
		t.Errorf("corrupted expected digest: %v", err)
	}
	r, err := newRegexp(src)
	if err != nil {
		t.Fatal(err)
	}
	r.(*regexpWL).want[1]++
	if err := r.Run(1); err == nil {
		t.Error("wrong expected match count not reported")
	}
	f := NewFib(time.Millisecond)
	f.want++
	if err := f.Run(0); err == nil {
		t.Error("wrong fib result not reported")
	}
}

func TestUnknownWorkloadIsAnError(t *testing.T) {
	if _, err := New("nope", &Source{}); err == nil || !strings.Contains(err.Error(), "hash") {
		t.Errorf("err %v", err)
	}
}

func TestSpinRunCheckedStopsAtTheFirstError(t *testing.T) {
	s := &Spin{Iters: 1000}
	calls := 0
	err := s.RunChecked(10, func() error {
		calls++
		if calls == 3 {
			return errStop
		}
		return nil
	})
	if err != errStop || calls != 3 {
		t.Errorf("err %v after %d calls", err, calls)
	}
}

type stopErr struct{}

func (stopErr) Error() string { return "stop" }

var errStop = stopErr{}

// Every caller of the spin loop runs the same machine code: inlined, the
// calibration, Run and RunChecked each got a copy at its own alignment, and
// the copies ran 10-15 % apart, so the quota scenario's checkpointing
// variants did more work per task than the plain ones.
func TestTheSpinLoopIsOneFunctionForEveryCaller(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command to ask the compiler: %v", err)
	}
	out, err := exec.Command(goTool, "build", "-o", os.DevNull, "-gcflags=-m", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build -gcflags=-m: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "inlining call to spinIters") {
			t.Errorf("the compiler inlines spinIters: %s", line)
		}
	}
}

// A Spin calibrated while other processes take the cores still takes
// about what it says once they stop: the calibration times the loop in
// its thread's CPU time, not wall time (a probe time-sliced with other
// test binaries made "100 µs" take 28 µs).
func TestSpinCalibratesOnABusyMachine(t *testing.T) {
	n := 4 * runtime.NumCPU()
	var hogs []*exec.Cmd
	for range n {
		c := exec.Command("sh", "-c", "while :; do :; done")
		if err := c.Start(); err != nil {
			t.Skipf("no shell to load the machine: %v", err)
		}
		hogs = append(hogs, c)
	}
	stop := func() {
		for _, c := range hogs {
			c.Process.Kill()
			c.Wait()
		}
		hogs = nil
	}
	defer stop()
	time.Sleep(50 * time.Millisecond) // the hogs are running
	sp := NewSpin(100 * time.Microsecond)
	stop()
	best := time.Duration(1 << 62)
	for range 50 {
		s := time.Now()
		sp.Run(0)
		best = min(best, time.Since(s))
	}
	if best < 60*time.Microsecond {
		t.Errorf("100 µs of work calibrated beside %d CPU-bound processes took %v", n, best)
	}
}
