//go:build linux

package osthread

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

const helperEnv = "CPUWORK_OSTHREAD_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(unprivilegedHelper(os.Getenv(helperEnv)))
	}
	goleak.VerifyTestMain(m)
}

// inLane runs fn on a thread of a fresh lane with s and returns what fn
// returned.
func inLane(t *testing.T, s Sched, fn func() error) {
	t.Helper()
	l, err := Start(Options{Threads: 1, Sched: s})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	if err := l.Do(context.Background(), fn); err != nil {
		t.Fatal(err)
	}
}

func TestLaneThreadsHaveTheRequestedScheduling(t *testing.T) {
	tests := []struct {
		name string
		s    Sched
	}{
		{"SCHED_IDLE", Demoted},
		{"nice 19", Nice19},
		{"SCHED_BATCH at nice 5", Sched{Policy: Batch, Nice: 5}},
		{"pinned to CPU 0", Sched{Policy: Other, CPUs: []int{0}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if cur, err := Current(); err == nil && os.Geteuid() != 0 && tt.s.Policy != Idle && cur.Nice > tt.s.Nice {
				t.Skipf("this process runs at nice %d: nice %d would be a raise, which needs CAP_SYS_NICE", cur.Nice, tt.s.Nice)
			}
			inLane(t, tt.s, func() error {
				got, err := Current()
				if err != nil {
					return err
				}
				if got.Policy != tt.s.Policy || (tt.s.Policy != Idle && got.Nice != tt.s.Nice) {
					return fmt.Errorf("sched_getattr says %+v, want %+v", got, tt.s)
				}
				if tt.s.CPUs != nil && fmt.Sprint(got.CPUs) != fmt.Sprint(tt.s.CPUs) {
					return fmt.Errorf("affinity %v, want %v", got.CPUs, tt.s.CPUs)
				}
				pol, nice, _, err := ThreadStat(os.Getpid(), unix.Gettid())
				if err != nil {
					return err
				}
				if pol != tt.s.Policy || (tt.s.Policy != Idle && nice != tt.s.Nice) {
					return fmt.Errorf("/proc stat says policy %s nice %d, want %+v", pol, nice, tt.s)
				}
				if unix.Gettid() == unix.Getpid() {
					return errors.New("lane runs on the main thread")
				}
				return nil
			})
		})
	}
}

func TestRealTimePolicyWherePermitted(t *testing.T) {
	l, err := Start(Options{Threads: 1, Sched: Sched{Policy: FIFO, RTPriority: 10}})
	if errors.Is(err, ErrPermission) {
		t.Skipf("SCHED_FIFO refused here (not privileged, or RT group scheduling): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	err = l.Do(context.Background(), func() error {
		pol, _, rt, err := ThreadStat(os.Getpid(), unix.Gettid())
		if err != nil {
			return err
		}
		if pol != FIFO || rt != 10 {
			return fmt.Errorf("policy %s rtprio %d", pol, rt)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestInvalidSchedIsAnError(t *testing.T) {
	for _, s := range []Sched{{Policy: Other, Nice: 25}, {Policy: FIFO}, {Policy: Other, RTPriority: 3}, {Policy: 42}, {Policy: Other, CPUs: []int{-1}}} {
		if _, err := Start(Options{Threads: 1, Sched: s}); err == nil {
			t.Errorf("%+v accepted", s)
		}
	}
	if _, err := Start(Options{Threads: 0}); err == nil {
		t.Error("0 threads accepted")
	}
}

// TestNoChangedPriorityOutlivesTheLane: after Close, the lane's demoted
// threads are gone (their goroutines exited locked, so the runtime
// discarded them), and no thread of the process runs at nice 19.
func TestNoChangedPriorityOutlivesTheLane(t *testing.T) {
	l, err := Start(Options{Threads: 4, Sched: Nice19})
	if err != nil {
		t.Fatal(err)
	}
	tids := l.TIDs()
	for range 20 {
		l.Do(context.Background(), func() error { return nil })
	}
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		alive := 0
		for _, tid := range tids {
			if _, err := os.Stat(fmt.Sprintf("/proc/self/task/%d", tid)); err == nil {
				alive++
			}
		}
		if alive == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of the lane's threads still exist after Close", alive)
		}
		time.Sleep(5 * time.Millisecond)
	}
	entries, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		var tid int
		fmt.Sscan(e.Name(), &tid)
		_, nice, _, err := ThreadStat(os.Getpid(), tid)
		if err == nil && nice == 19 {
			t.Errorf("thread %d still runs at nice 19", tid)
		}
	}
}

func TestLaneTasksPanicsCancellationAndClose(t *testing.T) {
	l, err := Start(Options{Threads: 2, Sched: Demoted, QueueLimit: 2})
	if err != nil {
		t.Fatal(err)
	}
	// A panic is raised again in Do's caller with its value; the lane
	// thread survives it and Go's onPanic gets the value and the stack.
	func() {
		defer func() {
			if r := recover(); r != "in lane" {
				t.Errorf("Do's caller recovered %v, want the task's panic value", r)
			}
		}()
		l.Do(context.Background(), func() error { panic("in lane") })
		t.Error("Do returned after its task panicked")
	}()
	got := make(chan string, 1)
	if err := l.Go(func() { panic("in Go") }, func(v any, stack []byte) {
		got <- fmt.Sprintf("%v %t", v, bytes.Contains(stack, []byte("osthread")))
	}); err != nil {
		t.Fatal(err)
	}
	if g := <-got; g != "in Go true" {
		t.Errorf("onPanic got %q, want the value and a stack", g)
	}
	if err := l.Do(context.Background(), func() error { return nil }); err != nil {
		t.Errorf("after panics: %v", err)
	}
	boom := errors.New("boom")
	if err := l.Do(context.Background(), func() error { return boom }); err != boom {
		t.Errorf("error: %v", err)
	}
	// Fill both threads, then cancel a queued task: it never runs.
	gate := make(chan struct{})
	for range 2 {
		if err := l.Go(func() { <-gate }, nil); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	ran := false
	if err := l.Do(ctx, func() error { ran = true; return nil }); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("queued task with expiring ctx: %v", err)
	}
	close(gate)
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if ran {
		t.Error("a task whose ctx ended before it started ran")
	}
	if err := l.Do(context.Background(), func() error { return nil }); !errors.Is(err, ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
	if err := l.Go(func() {}, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Go after Close: %v", err)
	}
}

func TestLockNonMainNeverUsesTheMainThread(t *testing.T) {
	for range 50 {
		var tid int
		LockNonMain(func() { tid = unix.Gettid() })
		if tid == unix.Getpid() {
			t.Fatal("ran on the main thread")
		}
	}
}

// TestUnprivilegedProcessGetsClearErrors re-runs this test binary as uid
// nobody: demotion must work, promotion must fail with ErrPermission naming
// CAP_SYS_NICE.
func TestUnprivilegedProcessGetsClearErrors(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to start a process as nobody")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "osthread-unpriv")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	bin := filepath.Join(dir, "osthread.test")
	if err := copyFile(exe, bin); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"demote", "promote-nice", "promote-fifo", "zero-at-nice-5"} {
		cmd := exec.Command(bin, "-test.run=^$")
		if mode == "zero-at-nice-5" { // every thread of the helper starts at nice 5
			cmd = exec.Command("nice", "-n", "5", bin, "-test.run=^$")
		}
		cmd.Env = append(os.Environ(), helperEnv+"="+mode)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("%s as nobody: %v\n%s", mode, err, out)
			continue
		}
		t.Logf("%s: %s", mode, strings.TrimSpace(string(out)))
	}
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// unprivilegedHelper runs inside the nobody process; exit code 0 means the
// expectation held.
func unprivilegedHelper(mode string) int {
	var s Sched
	wantErr := true
	switch mode {
	case "demote":
		s, wantErr = Demoted, false
	case "promote-nice":
		s = Sched{Policy: Other, Nice: -10}
	case "promote-fifo":
		s = Sched{Policy: FIFO, RTPriority: 10}
	case "zero-at-nice-5":
		// The zero Sched leaves the thread alone: no privilege needed even
		// though "nice 0" would be a raise from 5.
		l, err := Start(Options{Threads: 1})
		if err != nil {
			fmt.Println("zero Sched at nice 5:", err)
			return 1
		}
		defer l.Close(context.Background())
		for _, tid := range l.TIDs() {
			if _, nice, _, err := ThreadStat(os.Getpid(), tid); err != nil || nice != 5 {
				fmt.Printf("lane thread %d at nice %d (%v), want 5 kept\n", tid, nice, err)
				return 1
			}
		}
		fmt.Println("zero Sched kept nice 5")
		return 0
	}
	l, err := Start(Options{Threads: 1, Sched: s})
	switch {
	case wantErr && errors.Is(err, ErrPermission) && strings.Contains(err.Error(), "CAP_SYS_NICE"):
		fmt.Println("refused as expected:", err)
		return 0
	case !wantErr && err == nil:
		l.Close(context.Background())
		fmt.Println("demotion allowed unprivileged")
		return 0
	}
	fmt.Printf("mode %s: unexpected result %v\n", mode, err)
	return 1
}

func TestPlaceHookPutsEveryLaneThreadSomewhere(t *testing.T) {
	placed := make(chan int, 3)
	l, err := Start(Options{Threads: 3, Sched: Demoted, Place: func(tid int) error { placed <- tid; return nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	got := map[int]bool{}
	for range 3 {
		got[<-placed] = true
	}
	for _, tid := range l.TIDs() {
		if !got[tid] {
			t.Errorf("lane thread %d was not placed (placed %v)", tid, got)
		}
	}
	boom := errors.New("no such cgroup")
	if _, err := Start(Options{Threads: 2, Sched: Demoted, Place: func(int) error { return boom }}); !errors.Is(err, boom) {
		t.Errorf("a failing Place: %v", err)
	}
}
