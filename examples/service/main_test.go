package main

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestTheServiceServesWorkMetricsAndTheSampler(t *testing.T) {
	h, cleanup, err := newServer(slog.New(slog.DiscardHandler), false)
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	srv := httptest.NewServer(h)
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/hash?rounds=3"); code != 200 || len(strings.TrimSpace(body)) != 16 {
		t.Errorf("/hash: %d %q", code, body)
	}
	if code, _ := get("/hash?rounds=0"); code != 400 {
		t.Errorf("/hash?rounds=0: %d, want 400", code)
	}
	code, body := get("/metrics")
	for _, m := range []string{`cpuwork_queue_wait_seconds_bucket{class="interactive",le="0.01"}`, "cpuwork_slots", `cpuwork_tasks_total{class="interactive",outcome="completed"}`} {
		if code != 200 || !strings.Contains(body, m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
	if code, body := get("/debug/cpuwork"); code != 200 || !strings.Contains(body, `"executor"`) {
		t.Errorf("/debug/cpuwork: %d %.200s", code, body)
	}
}
