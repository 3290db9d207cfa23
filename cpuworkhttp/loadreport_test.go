package cpuworkhttp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/cpuwork/cpuwork"
	"github.com/cpuwork/cpuwork/cpuworkhttp"
	"github.com/cpuwork/cpuwork/loadreport"
)

var loadHeaderRE = regexp.MustCompile(`^TEXT application_utilization=([0-9.e+-]+), cpu_utilization=([0-9.e+-]+), rps_fractional=([0-9.e+-]+), eps=([0-9.e+-]+)$`)

// With ReportLoad every response carries the executor's load in Envoy's
// endpoint-load-metrics text format — served, refused and bypassed ones —
// and its rate counts the requests served; without it, no header.
func TestReportLoadAddsEnvoysHeaderToEveryResponse(t *testing.T) {
	e := newExecutor(t, cpuwork.Options{Slots: 1})
	work := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(time.Millisecond)
	})
	h := cpuworkhttp.Handler(e, work, cpuworkhttp.Options{Objective: time.Second, ReportLoad: true})
	var last string
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/work", nil))
		last = rec.Header().Get(loadreport.HeaderName)
		m := loadHeaderRE.FindStringSubmatch(last)
		if m == nil {
			t.Fatalf("%s: %q is not Envoy's text format", loadreport.HeaderName, last)
		}
		if rps, _ := strconv.ParseFloat(m[3], 64); rps > 0 {
			break
		}
	}
	if m := loadHeaderRE.FindStringSubmatch(last); m == nil || m[3] == "0" {
		t.Errorf("no request rate reported after serving requests for seconds: %q", last)
	}
	// A refused request carries it too.
	ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/work", nil).WithContext(ctx))
	if rec.Code == http.StatusOK || rec.Header().Get(loadreport.HeaderName) == "" {
		t.Errorf("a request past its deadline: status %d, header %q", rec.Code, rec.Header().Get(loadreport.HeaderName))
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/debug/pprof/", nil))
	if rec.Header().Get(loadreport.HeaderName) == "" {
		t.Error("a bypassed request has no load header")
	}
	off := cpuworkhttp.Handler(e, work, cpuworkhttp.Options{})
	rec = httptest.NewRecorder()
	off.ServeHTTP(rec, httptest.NewRequest("GET", "/work", nil))
	if v := rec.Header().Get(loadreport.HeaderName); v != "" {
		t.Errorf("ReportLoad off: header %q", v)
	}
}
