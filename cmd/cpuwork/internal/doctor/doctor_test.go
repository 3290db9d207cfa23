//go:build linux

package doctor

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/exec"
	"runtime"
	rpprof "runtime/pprof"
	rtrace "runtime/trace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cpuwork/cpuwork"
	"github.com/cpuwork/cpuwork/account"
	"github.com/cpuwork/cpuwork/cgroup"
	"github.com/cpuwork/cpuwork/cpuworkhttp"
	"github.com/cpuwork/cpuwork/schedstat"
)

// The gallery of known illnesses: this test binary, started again with
// DOCTOR_ILL set, becomes the sick process.
func TestMain(m *testing.M) {
	if ill := os.Getenv("DOCTOR_ILL"); ill != "" {
		sick(ill)
		return
	}
	goleak.VerifyTestMain(m)
}

var sink atomic.Int64

// lightWork is a light service's load: a little work every 50 ms.
func lightWork() {
	for {
		x := 0
		for i := range 100000 {
			x += i
		}
		sink.Add(int64(x))
		time.Sleep(50 * time.Millisecond)
	}
}

func spin() {
	x := int64(0)
	for {
		x++
		if x%(1<<30) == 0 {
			sink.Add(x)
		}
	}
}

// serveLoopback serves mux on a loopback port and prints its address for
// the test that started this process.
func serveLoopback(mux *http.ServeMux) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go http.Serve(ln, mux)
	fmt.Println(ln.Addr().String())
}

func sick(ill string) {
	name, arg, _ := strings.Cut(ill, ":")
	n, _ := strconv.Atoi(arg)
	spinners := 0
	switch name {
	case "fault": // one of the common faults of faults_test.go, served on loopback
		spinners = faultProgram(arg)
	case "busy": // n goroutines that never block
		for range n {
			go spin()
		}
	case "light": // a light service: a little work every 50 ms
		go lightWork()
	case "served": // n spinning goroutines behind /debug/cpuwork with a timer canary (started after "ready")
		s, err := schedstat.Start(schedstat.Options{Interval: 500 * time.Millisecond, TimerCanary: true})
		if err != nil {
			panic(err)
		}
		mux := http.NewServeMux()
		mux.Handle("/debug/cpuwork", schedstat.Handler(s, nil))
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		serveLoopback(mux)
		spinners = n
	case "executor": // n loops of accounted 2 ms Interactive tasks behind /debug/cpuwork serving Executor.Stats
		s, err := schedstat.Start(schedstat.Options{Interval: 500 * time.Millisecond})
		if err != nil {
			panic(err)
		}
		// Slots from the budget, followed each second: the process is
		// moved into its quota cgroup after it started.
		e, err := cpuwork.New(cpuwork.Options{Account: account.Options{Every: 1}})
		if err != nil {
			panic(err)
		}
		mux := http.NewServeMux()
		mux.Handle("/debug/cpuwork", schedstat.Handler(s, func() any { return e.Stats() }))
		serveLoopback(mux)
		for range n {
			go func() {
				for {
					e.Do(context.Background(), cpuwork.Interactive, func(ctx context.Context) error {
						end := time.Now().Add(2 * time.Millisecond)
						for time.Now().Before(end) {
							x := int64(0)
							for i := range 10_000 {
								x += int64(i)
							}
							sink.Add(x)
							cpuwork.Checkpoint(ctx)
						}
						return nil
					})
				}
			}()
		}
	case "middleware": // an idle service behind cpuworkhttp's middleware, /debug/ routed around it as the guide shows
		e, err := cpuwork.New(cpuwork.Options{})
		if err != nil {
			panic(err)
		}
		app := http.NewServeMux()
		app.HandleFunc("/work", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
		debug := http.NewServeMux()
		debug.HandleFunc("/debug/pprof/trace", pprof.Trace)
		debug.HandleFunc("/debug/pprof/profile", pprof.Profile)
		root := http.NewServeMux()
		root.Handle("/debug/", debug)
		root.Handle("/", cpuworkhttp.Handler(e, app, cpuworkhttp.Options{Objective: time.Second}))
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			panic(err)
		}
		go cpuworkhttp.Serve(&http.Server{Handler: root}, ln)
		fmt.Println(ln.Addr().String())
	case "pprof": // n spinning goroutines behind net/http/pprof only (started after "ready")
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		serveLoopback(mux)
		spinners = n
	}
	fmt.Println("ready")
	// Spinners behind a server start after "ready": 5,000 runnable
	// goroutines on 2 Ps would delay the print by tens of seconds.
	for range spinners {
		go spin()
	}
	select {}
}

// start runs an illness and returns its process once it is ready, with the
// first line it printed before "ready" (if any).
func start(t *testing.T, ill string, env ...string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), "DOCTOR_ILL="+ill), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(out)
	first := ""
	for sc.Scan() {
		if sc.Text() == "ready" {
			return cmd, first
		}
		first = sc.Text()
	}
	t.Fatalf("illness %s never got ready", ill)
	return nil, ""
}

func ids(r *Result) []string {
	var out []string
	for _, f := range r.Findings {
		out = append(out, f.ID)
	}
	return out
}

func diagnoseT(t testing.TB, cfg Config) *Result {
	t.Helper()
	if cfg.Duration == 0 {
		cfg.Duration = 1500 * time.Millisecond
	}
	r, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	r.Text(&b)
	t.Log("\n" + b.String())
	return r
}

// Without --url a light Go service is clean in the OS view only: not a
// full "healthy" (issue 38).
func TestALightServiceIsCleanInTheOSView(t *testing.T) {
	cmd, _ := start(t, "light")
	r := diagnoseT(t, Config{PID: cmd.Process.Pid})
	if got := ids(r); !slices.Equal(got, []string{"nothing-found-os-view"}) || r.Worst() != Partial {
		t.Errorf("a light service got findings %v (worst %s), want nothing-found-os-view", got, r.Worst())
	}
}

// A CPU hog beside the service on the same CPUs, no quota: the service's
// threads wait in the kernel's run queue.
func TestACompetingHogIsOSStarvation(t *testing.T) {
	n := runtime.NumCPU()
	cmd, _ := start(t, fmt.Sprintf("busy:%d", n), fmt.Sprintf("GOMAXPROCS=%d", n))
	start(t, fmt.Sprintf("busy:%d", n), fmt.Sprintf("GOMAXPROCS=%d", n)) // the hog
	r := diagnoseT(t, Config{PID: cmd.Process.Pid})
	if got := ids(r); !slices.Contains(got, "os-starvation") {
		t.Errorf("%d busy threads beside a %d-thread hog on %d CPUs: findings %v, want os-starvation", n, n, n, got)
	}
	if slices.Contains(ids(r), "healthy") {
		t.Error("healthy reported beside a finding")
	}
}

// GOMAXPROCS 4 in a half-CPU cgroup: gomaxprocs-above-quota and
// cpu-throttled. (With a whole CPU, a machine loaded by something else can
// give the four threads less than the quota, and then they are not
// throttled but starved: the doctor rightly says os-starvation. Half a CPU
// keeps the quota binding on a busy 2-CPU machine.)
func TestGOMAXPROCSAboveTheQuotaIsThrottled(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a cgroup with a CPU quota")
	}
	// A parent of its own: the run tests in another package check what
	// appears under "cpuwork" while this runs.
	g, err := cgroup.New(cgroup.Config{Name: cgroup.OwnedName("doctor-test"), Parent: "cpuwork-doctor-test", CPUs: 0.5})
	if err != nil {
		t.Skipf("cannot create a CPU cgroup here: %v", err)
	}
	t.Cleanup(func() {
		if err := g.Remove(); err != nil {
			t.Error(err)
		}
	})
	cmd, _ := start(t, "busy:4", "GOMAXPROCS=4")
	if err := g.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	// Kill it before the cleanup removes the group (cleanups run last-in first-out).
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	// 2.5 s: at least 20 periods, the fewest the throttled share is judged on.
	r := diagnoseT(t, Config{PID: cmd.Process.Pid, Duration: 2500 * time.Millisecond})
	got := ids(r)
	for _, want := range []string{"gomaxprocs-above-quota", "cpu-throttled"} {
		if !slices.Contains(got, want) {
			t.Errorf("GOMAXPROCS 4 in a half-CPU cgroup: findings %v, want %s", got, want)
		}
	}
	if slices.Contains(got, "os-starvation") {
		t.Errorf("throttling reported as OS starvation too: %v", got)
	}
}

// Thousands of runnable goroutines on few Ps, served with the sampler:
// oversubscribed and timer-starvation, read through --url.
func TestManyRunnableGoroutinesAreOversubscribedAndStarveTimers(t *testing.T) {
	cmd, addr := start(t, "served:100", "GOMAXPROCS=2")
	// A sample that already sees the 100 spinners: with every P spinning
	// the sampler may take no other before the window's end, and the
	// doctor then reads the first, taken while they were starting (58
	// runnable of 69 goroutines, in one CI run).
	waitSample(t, "http://"+addr, 30*time.Second, func(s *schedstat.Sample) bool { return s.Goroutines >= 100 })
	r := diagnoseT(t, Config{PID: cmd.Process.Pid, URL: "http://" + addr, Duration: time.Second})
	got := ids(r)
	for _, want := range []string{"oversubscribed", "timer-starvation"} {
		if !slices.Contains(got, want) {
			t.Errorf("100 spinning goroutines on 2 Ps: findings %v, want %s (unread %v; runtime view %+v)", got, want, r.Unread, r.Window.Runtime)
		}
	}
	if r.Window.Runtime == nil || r.Window.Runtime.Runnable < 100 {
		t.Errorf("runtime view %+v", r.Window.Runtime)
	}
}

// waitFirstSample waits, up to limit, until the sampler behind base has
// taken its first sample. A fixed sleep of one interval is not enough: on
// a loaded machine the sampler's goroutine waits in the run queue behind
// the spinners, once per tick and once per syscall that loses its P, and
// a fetch at the window's end can still find no sample.
func waitFirstSample(t testing.TB, base string, limit time.Duration) {
	t.Helper()
	waitSample(t, base, limit, func(*schedstat.Sample) bool { return true })
}

// waitSample waits, up to limit, until the sampler behind base has taken
// a sample for which ok holds.
func waitSample(t testing.TB, base string, limit time.Duration, ok func(*schedstat.Sample) bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		s, _, err := fetch(ctx, base)
		cancel()
		if err == nil && !ok(s) {
			err = fmt.Errorf("a sample, not yet the one wanted (%d goroutines)", s.Goroutines)
		}
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sampler at %s took no sample in %v: %v", base, limit, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Without the sampler, the execution trace alone shows the run queues.
func TestAnOversubscribedServiceIsFoundFromItsExecutionTrace(t *testing.T) {
	// 20 spinners: enough runnable goroutines per P for the rule, few
	// enough that the pprof handler gets a P within the doctor's margin
	// on a loaded CI machine (100 made it answer after the margin).
	cmd, addr := start(t, "pprof:20", "GOMAXPROCS=2")
	r := diagnoseT(t, Config{PID: cmd.Process.Pid, URL: "http://" + addr, Duration: time.Second})
	if !slices.Contains(ids(r), "oversubscribed") {
		t.Errorf("20 spinning goroutines on 2 Ps, traced: findings %v, want oversubscribed (unread %v, trace %+v)", ids(r), r.Unread, r.Window.Trace)
	}
	if r.Window.Trace == nil || r.Window.Trace.Procs != 2 {
		t.Errorf("trace view %+v: want 2 Ps", r.Window.Trace)
	}
	if p := r.Window.Profile; p == nil || p.Samples == 0 {
		t.Errorf("profile view %+v: want CPU samples of two busy Ps", p)
	}
	if !strings.Contains(strings.Join(r.NotServed, " "), "/debug/cpuwork") || strings.Contains(strings.Join(r.Unread, " "), "/debug/cpuwork") {
		t.Errorf("the missing /debug/cpuwork was not reported as not served: not served %v, not read %v", r.NotServed, r.Unread)
	}
}

func TestReadTraceMeasuresRunnableWaits(t *testing.T) {
	// A trace of this process while 8 goroutines share its Ps.
	var buf bytes.Buffer
	if err := rtrace.Start(&buf); err != nil {
		t.Skip(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
					sink.Add(1)
				}
			}
		}()
	}
	time.Sleep(200 * time.Millisecond)
	close(stop)
	wg.Wait()
	rtrace.Stop()
	v, err := readTrace(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if v.Waits == 0 || v.WaitMax < time.Millisecond || v.Procs == 0 {
		t.Errorf("8 busy goroutines on %d Ps for 200 ms: %+v", runtime.GOMAXPROCS(0), v)
	}
	if _, err := readTrace(strings.NewReader("not a trace")); err == nil {
		t.Error("garbage parsed as a trace")
	}
}

func TestBadTargetsFailClearly(t *testing.T) {
	if _, err := Run(Config{PID: 0}); err == nil {
		t.Error("pid 0 accepted")
	}
	if _, err := Run(Config{PID: 1 << 30, Duration: time.Millisecond}); err == nil {
		t.Error("a missing process accepted")
	}
	cmd, _ := start(t, "light")
	r, err := Run(Config{PID: cmd.Process.Pid, URL: "http://127.0.0.1:1", Duration: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Unread) == 0 || !strings.Contains(strings.Join(r.Unread, " "), "127.0.0.1:1") {
		t.Errorf("an unreachable --url was not reported: %v", r.Unread)
	}
}

func TestReadProfileCountsSamples(t *testing.T) {
	var buf bytes.Buffer
	if err := rpprof.StartCPUProfile(&buf); err != nil {
		t.Skip(err)
	}
	deadline := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(deadline) {
		sink.Add(1)
	}
	rpprof.StopCPUProfile()
	v, err := readProfile(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if v.Samples < 5 || v.SchedulerShare > 0.5 {
		t.Errorf("300 ms of spinning: %+v", v)
	}
	if _, err := readProfile(strings.NewReader("not a profile")); err == nil {
		t.Error("garbage parsed as a profile")
	}
}
