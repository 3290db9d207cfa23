package cpuworkhttp

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cpuwork/cpuwork"
)

// The trace handler serves what the middleware recorded, one line per
// request after the header, and says what to set when nothing is recorded.
func TestTheTraceHandlerServesTheRecordedRequests(t *testing.T) {
	e, err := cpuwork.New(cpuwork.Options{Slots: 1, Record: cpuwork.RecordOptions{Observe: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	mux := http.NewServeMux()
	mux.Handle("/", Handler(e, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }), Options{Objective: 250 * time.Millisecond}))
	mux.Handle(TracePath, TraceHandler(e))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for range 3 {
		resp, err := http.Get(srv.URL + "/work")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	resp, err := http.Get(srv.URL + TracePath)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	lines := strings.Split(strings.TrimSpace(string(body)), "\n")
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/csv") || len(lines) != 4 {
		t.Fatalf("%s %q:\n%s", resp.Status, resp.Header.Get("Content-Type"), body)
	}
	if !strings.Contains(lines[1], ",interactive,") || !strings.Contains(lines[1], ",250,") || !strings.Contains(lines[1], ",served,") {
		t.Fatalf("a request's line: %q", lines[1])
	}

	none, _ := cpuwork.New(cpuwork.Options{Slots: 1})
	defer none.Close(context.Background())
	rec := httptest.NewRecorder()
	TraceHandler(none).ServeHTTP(rec, httptest.NewRequest("GET", TracePath, nil))
	if rec.Code != 404 || !strings.Contains(rec.Body.String(), "Options.Record") {
		t.Fatalf("%d %q", rec.Code, rec.Body.String())
	}
}
