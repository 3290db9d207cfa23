package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cpuwork/cpuwork"
	"github.com/cpuwork/cpuwork/cpuworkhttp"
	"github.com/cpuwork/cpuwork/schedstat"
)

// spinFor spins until d of wall time has passed.
func spinFor(d time.Duration) (x uint64) {
	for end := time.Now().Add(d); time.Now().Before(end); {
		for range 1024 {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	return x
}

// A service's traffic round-trips: recorded under Observe through the
// HTTP middleware, served at cpuworkhttp.TracePath, fetched by
// simulate --from with the service's slots from /debug/cpuwork and the
// objective it recorded, and replayed through every policy, each
// request counted once.
func TestSimulateReplaysAServicesRecordedTraffic(t *testing.T) {
	e, err := cpuwork.New(cpuwork.Options{Slots: 2, Record: cpuwork.RecordOptions{Observe: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	s, err := schedstat.Start(schedstat.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mux := http.NewServeMux()
	work := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d := time.Millisecond
		if r.URL.Query().Get("size") == "large" {
			d = 8 * time.Millisecond
		}
		fmt.Fprint(w, spinFor(d))
	})
	mux.Handle("/work", cpuworkhttp.Handler(e, work, cpuworkhttp.Options{Objective: 40 * time.Millisecond, Key: func(r *http.Request) string { return r.Header.Get("X-Tenant") }}))
	mux.Handle(cpuworkhttp.TracePath, cpuworkhttp.TraceHandler(e))
	mux.Handle("/debug/cpuwork", schedstat.Handler(s, func() any { return e.Stats() }))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	const n = 60
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			size := "small"
			if i%10 == 0 {
				size = "large"
			}
			req, _ := http.NewRequest("GET", srv.URL+"/work?size="+size, nil)
			req.Header.Set("X-Tenant", fmt.Sprint("tenant-", i%3))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		})
		time.Sleep(time.Millisecond)
	}
	wg.Wait()

	out, err := run(t, "simulate", "--from", srv.URL, "--json")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{
		"2 slots, the executor's",
		"objectives from the targets it recorded: interactive=40ms",
		fmt.Sprintf("where it was recorded: %d served, 0 refused", n),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	for _, policy := range []string{`"cpuwork"`, `"goroutines"`, `"pool-503"`} {
		if !strings.Contains(out, policy) {
			t.Errorf("no policy %s in:\n%s", policy, out)
		}
	}
	if !strings.Contains(out, fmt.Sprintf(`"requests": %d`, n)) {
		t.Errorf("not every request replayed once:\n%s", out)
	}
}

// --from says what to set when the service records nothing, and what to
// give when it serves no executor's view; a bad URL is a usage error.
func TestSimulateFromSaysWhatTheServiceLacks(t *testing.T) {
	e, err := cpuwork.New(cpuwork.Options{Slots: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	mux := http.NewServeMux()
	mux.Handle(cpuworkhttp.TracePath, cpuworkhttp.TraceHandler(e))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	if out, err := run(t, "simulate", "--from", srv.URL); err == nil || !strings.Contains(err.Error()+out, "give --slots") {
		t.Errorf("no /debug/cpuwork: %v\n%s", err, out)
	}
	if out, err := run(t, "simulate", "--from", srv.URL, "--slots", "1"); err == nil || !strings.Contains(err.Error()+out, "Options.Record") {
		t.Errorf("nothing recorded: %v\n%s", err, out)
	}
	if out, err := run(t, "simulate", "--from", "file:///etc/passwd"); err == nil || !strings.Contains(err.Error()+out, "want the service's base URL") {
		t.Errorf("a file URL: %v\n%s", err, out)
	}
}

// --cpus stretches a trace's CPU times by slots/cpus and says so; it is
// refused above the slots, below 0, and without a trace.
func TestSimulateStretchesATraceUnderAFractionalQuota(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.csv")
	if err := os.WriteFile(path, []byte("arrival_ms,class,cpu_ms\n0,interactive,3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "simulate", "--trace", path, "--slots", "2", "--cpus", "1.5", "--objective", "interactive=1s", "--json")
	if err != nil || !strings.Contains(out, "stretched 1.33x") || !strings.Contains(out, `"p50_served_s": 0.004`) {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, args := range [][]string{
		{"--trace", path, "--slots", "2", "--cpus", "3"},
		{"--trace", path, "--slots", "2", "--cpus", "-1"},
		{"--cpus", "1.5"},
	} {
		if out, err := run(t, append([]string{"simulate"}, args...)...); err == nil {
			t.Errorf("%v: taken\n%s", args, out)
		}
	}
}

// With --throttle the quota is replayed as the kernel enforces it: two
// requests of 100 ms on 2 slots under 1.5 CPUs are frozen from 75 ms to
// the period's end and end at 125 ms (a 1 s objective absorbs the pause:
// the pacer keeps the slot open); the note says so. --throttle needs
// --cpus, and the scenarios take neither.
func TestSimulateThrottlesATraceUnderAFractionalQuota(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.csv")
	if err := os.WriteFile(path, []byte("arrival_ms,class,cpu_ms\n0,interactive,100\n0,interactive,100\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "simulate", "--trace", path, "--slots", "2", "--cpus", "1.5", "--throttle", "--objective", "interactive=1s", "--json")
	if err != nil || !strings.Contains(out, "under a CFS quota of 1.5 CPUs") || !strings.Contains(out, "pacer of the fractional slot runs as the executor's default") || !strings.Contains(out, `"p50_served_s": 0.125`) {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, args := range [][]string{
		{"--trace", path, "--slots", "2", "--throttle"},
		{"--throttle"},
	} {
		if out, err := run(t, append([]string{"simulate"}, args...)...); err == nil {
			t.Errorf("%v: taken\n%s", args, out)
		}
	}
}
