package doctor

import (
	"net/http"
	"net/http/httptest"
	"net/http/pprof"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cpuwork/cpuwork/schedstat"
)

// source answers one of the doctor's sources as a target would: served,
// not served (404), forbidden (403), never (until the doctor gives up),
// with a body that is not what it should be, or shed by an admission
// middleware (503 with Retry-After).
func source(status string, serve http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		switch status {
		case "ok":
			serve(w, r)
		case "404":
			http.NotFound(w, r)
		case "403":
			http.Error(w, "forbidden", http.StatusForbidden)
		case "timeout":
			<-r.Context().Done()
		case "malformed":
			w.Write([]byte("<html>not what was asked for</html>"))
		case "shed":
			w.Header().Set("Retry-After", "1")
			http.Error(w, "shed", http.StatusServiceUnavailable)
		}
	}
}

// Each of the doctor's sources from --url, in each state, beside the
// others served: a 404 means the program does not serve it (listed as
// not served, never as not read); a required source that fails (Go's
// view: the trace and /debug/cpuwork both missing) makes nothing found
// inconclusive with the source named; an optional one that fails is
// listed under "not read" and the light target is still healthy.
func TestEverySourceStatus(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a target and a doctor window per case")
	}
	old := margin
	margin = 700 * time.Millisecond // how long a source that never answers is waited for
	t.Cleanup(func() { margin = old })
	s, err := schedstat.Start(schedstat.Options{Interval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	debug := schedstat.Handler(s, nil).ServeHTTP
	cmd, _ := start(t, "light")
	time.Sleep(300 * time.Millisecond) // the sampler's first sample
	type want struct {
		verdict            string
		notServed, notRead string // a substring of a line, "" for none
		noNotRead          bool
	}
	cases := []struct {
		trace, profile, debug string
		want                  want
	}{
		{"ok", "ok", "ok", want{verdict: "healthy", noNotRead: true}},
		{"ok", "ok", "404", want{verdict: "healthy", notServed: "no cpuwork executor", noNotRead: true}},
		{"ok", "404", "404", want{verdict: "healthy", notServed: "no CPU profile", noNotRead: true}},
		{"404", "ok", "ok", want{verdict: "healthy", notServed: "no execution trace", noNotRead: true}},
		{"404", "ok", "404", want{verdict: "inconclusive"}},
		{"403", "ok", "404", want{verdict: "inconclusive", notRead: "403"}},
		{"timeout", "ok", "404", want{verdict: "inconclusive", notRead: "trace"}},
		{"malformed", "ok", "404", want{verdict: "inconclusive", notRead: "trace"}},
		{"403", "ok", "ok", want{verdict: "healthy", notRead: "403"}},
		{"ok", "403", "404", want{verdict: "healthy", notRead: "403"}},
		{"ok", "timeout", "404", want{verdict: "healthy", notRead: "profile"}},
		{"ok", "malformed", "404", want{verdict: "healthy", notRead: "profile"}},
		{"ok", "ok", "403", want{verdict: "healthy", notRead: "403"}},
		{"ok", "ok", "timeout", want{verdict: "healthy", notRead: "/debug/cpuwork"}},
		{"ok", "ok", "malformed", want{verdict: "healthy", notRead: "/debug/cpuwork"}},
		{"404", "ok", "403", want{verdict: "inconclusive", notRead: "403"}},
		{"shed", "shed", "shed", want{verdict: "inconclusive", notRead: "shed by the target's admission"}},
	}
	for _, c := range cases {
		name := "trace " + c.trace + ", profile " + c.profile + ", /debug/cpuwork " + c.debug
		t.Run(name, func(t *testing.T) {
			mux := http.NewServeMux()
			mux.HandleFunc("/debug/pprof/trace", source(c.trace, pprof.Trace))
			mux.HandleFunc("/debug/pprof/profile", source(c.profile, pprof.Profile))
			mux.HandleFunc("/debug/cpuwork", source(c.debug, debug))
			mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {})
			srv := httptest.NewServer(mux)
			defer srv.Close()
			r, err := Run(Config{PID: cmd.Process.Pid, URL: srv.URL, Duration: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			var text strings.Builder
			r.Text(&text)
			// What the sources decide (Lacks) does not depend on the
			// machine; the verdict does when another rule fires (a loaded
			// machine can make the probes slow): it is checked only
			// where no rule did.
			if lacks := len(r.Lacks) > 0; lacks != (c.want.verdict == "inconclusive") {
				t.Errorf("lacks %q, want a needed source lacking: %v:\n%s", r.Lacks, c.want.verdict == "inconclusive", text.String())
			}
			if got := r.Findings[0].ID; (got == "healthy" || got == "inconclusive") && got != c.want.verdict {
				t.Errorf("verdict %s, want %s:\n%s", got, c.want.verdict, text.String())
			} else if got != "healthy" && got != "inconclusive" {
				t.Logf("a rule fired on this machine (%s): the verdict is not checked", got)
			}
			if c.want.verdict == "inconclusive" && !strings.Contains(strings.Join(r.Lacks, " "), "/debug/") {
				t.Errorf("lacking without naming the source: %q", r.Lacks)
			}
			has := func(list []string, sub string) bool {
				return slices.ContainsFunc(list, func(l string) bool { return strings.Contains(l, sub) })
			}
			if c.want.notServed != "" && !has(r.NotServed, c.want.notServed) {
				t.Errorf("not served %q, want a line with %q", r.NotServed, c.want.notServed)
			}
			if c.want.notRead != "" && !has(r.Unread, c.want.notRead) {
				t.Errorf("not read %q, want a line with %q", r.Unread, c.want.notRead)
			}
			if c.want.noNotRead && len(r.Unread) > 0 {
				t.Errorf("not read %q, want nothing", r.Unread)
			}
			if has(r.Unread, "404 Not Found") {
				t.Errorf("a 404 listed as not read: %q", r.Unread)
			}
		})
	}
}

// An idle program nobody here wrote serves net/http/pprof only: with
// --url it is healthy, and /debug/cpuwork is "not served", never "not
// read" (issue 61: it was inconclusive, exit 4).
func TestAProgramServingOnlyPprofIsHealthy(t *testing.T) {
	for _, ill := range []string{"pprof:0", "middleware"} {
		t.Run(ill, func(t *testing.T) { healthyWithPprof(t, ill) })
	}
}

// healthyWithPprof: the program ill serves net/http/pprof only (behind
// cpuwork's middleware for "middleware", with /debug/ routed around it).
func healthyWithPprof(t *testing.T, ill string) {
	cmd, addr := start(t, ill)
	r := diagnoseT(t, Config{PID: cmd.Process.Pid, URL: "http://" + addr, Duration: 2 * time.Second})
	if len(r.Lacks) > 0 || len(r.Unread) > 0 || len(r.NotServed) != 1 || !strings.Contains(r.NotServed[0], "/debug/cpuwork: no cpuwork executor") {
		t.Errorf("lacks %q, not read %q, not served %q: want a whole view, only /debug/cpuwork not served", r.Lacks, r.Unread, r.NotServed)
	}
	// healthy unless a rule fires on a loaded machine (slow probes):
	// never inconclusive.
	if got := ids(r); got[0] == "inconclusive" || got[0] != "healthy" && r.Worst() == Info {
		t.Errorf("findings %v (worst %s), want healthy", got, r.Worst())
	} else if got[0] != "healthy" {
		t.Logf("a rule fired on this machine: %v", got)
	}
}
