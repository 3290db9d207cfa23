//go:build linux

package cpuwork

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cpuwork/cpuwork/account"
	"github.com/cpuwork/cpuwork/cgroup"
	"golang.org/x/sys/unix"
)

// An accounted task keeps its thread from its slot to its end, however
// often it parks (its sleeps land in other, nothing is lost), while a busy
// goroutine keeps the other Ps busy so that a parked goroutine would often
// resume on another thread.
func TestAnAccountedTaskKeepsItsThreadAndItsSleepsAreOther(t *testing.T) {
	e, got := accountExec(t, Options{Slots: 2})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
				x := uint64(1)
				for i := range 10_000 {
					x = x*31 + uint64(i)
				}
				sinkU.Store(x)
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	// The first three tasks' accounts are not checked: in a fresh process
	// the parking thread itself works while its goroutine sleeps (handoffp
	// starting Ms, newm's clone, the race runtime's per-thread set-up;
	// seen as 3.9 ms on CPU and 4 ms of run delay during 2.5 ms of sleeps
	// 12 ms after the test binary started, 1 run in 6), which the account
	// rightly shows as on-CPU and run queue time, not other; and the
	// test's own goroutine waited 3.5 ms for a CPU between its clock read
	// and Do (1 run in 8), which no account sees.
	for i := range 23 {
		var first, last int
		a, outside := accountOne(t, e, context.Background(), got, func(ctx context.Context) error {
			first = unix.Gettid()
			for range 5 {
				time.Sleep(500 * time.Microsecond) // parks
			}
			last = unix.Gettid()
			return nil
		})
		if first != last {
			t.Fatalf("task %d ran on threads %d and %d: an accounted task must keep its thread", i, first, last)
		}
		if i < 3 {
			continue
		}
		checkSum(t, a, outside)
		if a.Partial != "" || a.Parts[account.Other] < 2*time.Millisecond {
			t.Errorf("task %d, 2.5 ms of sleeping: %+v, want a whole account with the sleeps in other", i, a)
		}
	}
}

// accountChild runs in a cgroup or beside a competitor
// (TestThrottlingAndRunDelayAreWhereTheTimeWent): one accounted 120 ms
// spinning task on one slot; prints its account as JSON.
func accountChild() {
	var acc account.Task
	e, err := New(Options{Slots: 1, WatchInterval: -1, Account: account.Options{Every: 1, OnTask: func(a account.Task) { acc = a }}})
	if err != nil {
		fmt.Println(`{"err":"` + err.Error() + `"}`)
		os.Exit(1)
	}
	e.Do(context.Background(), Interactive, func(ctx context.Context) error {
		spinChecked(ctx, 120*time.Millisecond)
		return nil
	})
	e.Close(context.Background())
	out, _ := json.Marshal(acc)
	fmt.Println(string(out))
}

// runAccountChild starts the test binary as accountChild with extra env,
// after prep (which may move it into a cgroup through its shell).
func runAccountChild(t *testing.T, shell string, env ...string) account.Task {
	t.Helper()
	cmd := exec.Command("sh", "-c", shell, "sh", os.Args[0])
	cmd.Env = append(append(os.Environ(), "CPUWORK_ACCOUNT_CHILD=1", "GOMAXPROCS=1"), env...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v: %s", err, out)
	}
	var a account.Task
	if err := json.Unmarshal(out, &a); err != nil {
		t.Fatalf("child output %q: %v", out, err)
	}
	t.Logf("%+v", a)
	return a
}

func TestThrottlingAndRunDelayAreWhereTheTimeWent(t *testing.T) {
	if runtime.GOOS != "linux" || os.Geteuid() != 0 || cgroup.Version() == 0 {
		t.Skip("needs root and a cgroup CPU controller")
	}
	t.Run("a task in a 0.2-CPU cgroup is mostly throttled", func(t *testing.T) {
		g, err := cgroup.New(cgroup.Config{Name: cgroup.OwnedName("account-test"), Parent: "cpuwork-test-account", CPUs: 0.2})
		if err != nil {
			t.Skip("cannot create a quota cgroup here:", err)
		}
		defer g.Remove()
		a := runAccountChild(t, `echo $$ > "`+g.ProcsFile()+`" && exec "$1" -test.run '^$'`)
		if a.Partial != "" && !strings.Contains(a.Partial, "moved") {
			t.Fatalf("partial account: %s", a.Partial)
		}
		if largest(a) != account.Throttled {
			t.Errorf("120 ms of CPU under a 0.2-CPU quota (~500 ms of wall): %+v, want throttled the largest part", a)
		}
	})
	t.Run("a task sharing its CPU with a busy loop waits in the kernel run queue", func(t *testing.T) {
		// The child and a shell busy loop on CPU 0 only, each in a cgroup
		// of its own with the same weight: the task gets about half.
		a := runAccountChild(t, `(trap 'exit 0' TERM; while :; do :; done) & loop=$!; taskset -p 1 $loop >/dev/null; `+
			`taskset 1 "$1" -test.run '^$'; s=$?; kill $loop; exit $s`)
		if a.Partial != "" && !strings.Contains(a.Partial, "moved") {
			t.Fatalf("partial account: %s", a.Partial)
		}
		if a.Parts[account.KernelRunQueue] < a.Run/4 {
			t.Errorf("120 ms of CPU beside a busy loop on the same CPU: %+v, want a quarter or more in kernel_run_queue", a)
		}
	})
}
