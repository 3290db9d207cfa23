package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cpuwork/cpuwork/cmd/cpuwork/internal/workload"
	vegeta "github.com/tsenart/vegeta/v12/lib"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRunRejectsAnUnknownScenario(t *testing.T) {
	if _, err := Run(Config{Scenarios: []string{"nope"}}); err == nil || !strings.Contains(err.Error(), "burst") {
		t.Errorf("err %v", err)
	}
}

// TestReportFilesFromARealShortRun runs the burst scenario at a tiny size
// and checks the tables, results.json and index.html it produces.
func TestReportFilesFromARealShortRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a real scenario")
	}
	r := &Runner{rounds: 1, duration: 100 * time.Millisecond, slots: 2}
	spin := workload.NewSpin(2 * time.Millisecond)
	s := r.burst("burst-test", 20, spin.D, spin)
	rep := &Report{Machine: describeMachine(), Scenarios: []*Scenario{s}}
	for _, v := range s.Variants {
		if !v.Valid {
			t.Fatalf("%s invalid: %s", v.Name, v.Invalid)
		}
		if v.Latency.Count != 20 || v.Latency.P50 <= 0 || v.Latency.Max < v.Latency.P50 {
			t.Errorf("%s latency %+v", v.Name, v.Latency)
		}
		if v.Extra["makespan_s"] < v.Extra["first_result_s"] {
			t.Errorf("%s makespan before first result: %v", v.Name, v.Extra)
		}
	}
	if s.variant("semaphore").Ratio["p99"] == 0 {
		t.Error("no ratio to the baseline")
	}
	var tables bytes.Buffer
	WriteTables(&tables, rep)
	for _, want := range []string{"burst-test", "goroutine", "cpuwork", "verdict"} {
		if !strings.Contains(tables.String(), want) {
			t.Errorf("tables lack %q", want)
		}
	}
	dir := t.TempDir()
	if err := WriteDir(dir, rep); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var parsed struct {
		Machine   map[string]any `json:"machine"`
		Scenarios []struct {
			Name     string `json:"name"`
			Variants []struct {
				Name    string             `json:"name"`
				Latency map[string]float64 `json:"latency"`
				Valid   bool               `json:"valid"`
			} `json:"variants"`
			Verdict string `json:"verdict"`
		} `json:"scenarios"`
	}
	if err := json.Unmarshal(data, &parsed); err != nil {
		t.Fatal(err)
	}
	if len(parsed.Scenarios) != 1 || len(parsed.Scenarios[0].Variants) != len(burstVariants) {
		t.Fatalf("results.json %s", data)
	}
	for _, k := range []string{"mean_s", "p50_s", "p90_s", "p99_s", "p999_s", "max_s"} {
		if _, ok := parsed.Scenarios[0].Variants[0].Latency[k]; !ok {
			t.Errorf("latency lacks %s", k)
		}
	}
	page, err := os.ReadFile(filepath.Join(dir, "index.html"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(page, []byte("<svg")) || bytes.Contains(page, []byte("http://cdn")) || bytes.Contains(page, []byte("<script src")) {
		t.Error("index.html lacks inline plots or loads something remote")
	}
	if _, err := os.Stat(filepath.Join(dir, "histograms", "burst-test-cpuwork.json")); err != nil {
		t.Error(err)
	}
	for _, want := range []string{`class="summary"`, `<a href="#burst-test">`, "<table>", "p99 (median [range] of repeats)"} {
		if !bytes.Contains(page, []byte(want)) {
			t.Errorf("index.html lacks %q", want)
		}
	}
	if !bytes.Contains(data, []byte(`"repeats"`)) {
		t.Error("results.json has no per-repeat summaries")
	}
}

// The generator's mix is drawn, not a pattern: a fixed 9:1 round-robin
// puts every large request ten places after the last one, which lines it
// up with a server's queue (a FIFO of four holds at most four small ones
// ahead of it). Its blocks keep the share exact.
func TestTheMixIsDrawnAtRandomFromItsSeed(t *testing.T) {
	kinds := [2]vegeta.Target{{URL: "small"}, {URL: "large"}}
	draw := func(seed uint64, n int) []string {
		tr := mixTargeter(kinds, smallShare, seed)
		out := make([]string, n)
		for i := range out {
			var tg vegeta.Target
			if err := tr(&tg); err != nil {
				t.Fatal(err)
			}
			out[i] = tg.URL
		}
		return out
	}
	const n = 100_000
	a := draw(7, n)
	if !slices.Equal(a, draw(7, n)) {
		t.Error("the same seed drew another sequence")
	}
	if slices.Equal(a, draw(8, n)) {
		t.Error("another seed drew the same sequence")
	}
	for i := 0; i < n; i += mixBlock {
		large := 0
		for _, k := range a[i : i+mixBlock] {
			if k == "large" {
				large++
			}
		}
		if large != mixBlock/10 {
			t.Fatalf("block at %d holds %d large requests, want %d", i, large, mixBlock/10)
		}
	}
	// Within a block the places are drawn: the gaps between large
	// requests are nearly geometric, two in a row about one time in
	// eleven and gaps past 30 (0.9^29 ≈ 5 %) as well; a fixed pattern has
	// only gaps of ten.
	gaps, last := map[int]int{}, -1
	for i, k := range a {
		if k == "large" {
			if last >= 0 {
				gaps[i-last]++
			}
			last = i
		}
	}
	large, long := n/10, 0
	for g, c := range gaps {
		if g > 30 {
			long += c
		}
	}
	if gaps[1] < large/20 || long < large/40 || gaps[10] > large/10 {
		t.Errorf("gaps between large requests: 1: %d, 10: %d, >30: %d of %d", gaps[1], gaps[10], long, large)
	}
	tr := mixTargeter(kinds, 1, 7)
	for range 1000 {
		var tg vegeta.Target
		tr(&tg)
		if tg.URL != "small" {
			t.Fatal("share 1 (--only-small) sent a large request")
		}
	}
	if err := tr(nil); err == nil {
		t.Error("a nil target accepted")
	}
}

func TestFileNamesAreSafe(t *testing.T) {
	for in, want := range map[string]string{"service-naive@95%.json": "service-naive_95pct.json", "cpuwork+nice0": "cpuwork-with-nice0", "quota-P=1@0.25": "quota-P_1_0.25"} {
		if got := fileName(in); got != want {
			t.Errorf("fileName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestLoadGenSendsOpenLoopRequestsAndReportsEachOne(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/large" {
			// The large kind carries its body as a POST; small ones are GETs.
			if r.Method != "POST" || string(body) != "large body" {
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		if r.Method != "GET" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.Write([]byte("ok"))
	}))
	defer srv.Close()
	var out bytes.Buffer
	if err := LoadGen(&out, LoadSpec{Base: srv.URL, Rate: 100, Duration: 300 * time.Millisecond, LargeBody: []byte("large body"), MixSeed: 1}); err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(&out)
	kinds := map[string]int{}
	codes := map[uint16]int{}
	n := 0
	for dec.More() {
		var lr LoadResult
		if err := dec.Decode(&lr); err != nil {
			t.Fatal(err)
		}
		kinds[lr.Kind]++
		codes[lr.Code]++
		n++
	}
	if n < 25 || n > 35 { // 100/s for 0.3 s
		t.Errorf("%d requests, want about 30", n)
	}
	// Every request asks the targeter once: the kinds sent are the first n
	// of the seed's sequence, whatever order the answers come back in.
	tr := mixTargeter([2]vegeta.Target{{URL: "small"}, {URL: "large"}}, smallShare, 1)
	want := map[string]int{}
	for range n {
		var tg vegeta.Target
		tr(&tg)
		want[tg.URL]++
	}
	if kinds["small"] != want["small"] || kinds["large"] != want["large"] {
		t.Errorf("mix %v, want the seed's first %d kinds %v", kinds, n, want)
	}
	if codes[503] != kinds["large"] || codes[200] != kinds["small"] {
		t.Errorf("codes %v for kinds %v", codes, kinds)
	}
	if err := LoadGen(&out, LoadSpec{Base: srv.URL, Duration: time.Second, MixSeed: 1}); err == nil {
		t.Error("rate 0 accepted")
	}
}

// The os-thread-pool and hybrid variants raise and pin their locked
// threads. A thread locked with runtime.LockOSThread may be the process's
// main thread, which the runtime never discards: it kept SCHED_FIFO and the
// pin for the rest of the run (seen by `cpuwork doctor` as a 1-CPU affinity
// of the bench process). They must lock with osthread.LockNonMain.
func TestRaisedVariantsLeaveTheMainThreadAlone(t *testing.T) {
	var before unix.CPUSet
	if err := unix.SchedGetaffinity(os.Getpid(), &before); err != nil {
		t.Fatal(err)
	}
	r := &Runner{duration: 30 * time.Millisecond, slots: 1, rounds: 1}
	for range 10 {
		for _, v := range []string{"os-thread-pool", "hybrid"} {
			if _, err := r.priorityOnce(v, workload.NewSpin(100*time.Microsecond), workload.NewSpin(time.Millisecond), time.Millisecond, false); err != nil {
				t.Fatal(err)
			}
		}
	}
	var after unix.CPUSet
	if err := unix.SchedGetaffinity(os.Getpid(), &after); err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Errorf("the main thread's affinity changed from %d to %d CPUs", before.Count(), after.Count())
	}
}

// vegeta's constant pacer takes whole requests per second: a rate of 65.8
// sent 65/s, and the validity check (sent >= 99 % of offered) marked every
// variant at that load invalid. LoadGen refuses a fractional rate; the
// scenarios offer whole rates.
func TestLoadGenRefusesAFractionalRate(t *testing.T) {
	var out bytes.Buffer
	if err := LoadGen(&out, LoadSpec{Base: "http://127.0.0.1:1", Rate: 65.8, Duration: time.Millisecond, MixSeed: 1}); err == nil {
		t.Error("a rate of 65.8/s was accepted; the pacer would send 65/s")
	}
	if got := wholeRate(65.8); got != 65 {
		t.Errorf("wholeRate(65.8) = %v", got)
	}
	if got := wholeRate(0.4); got != 1 {
		t.Errorf("wholeRate(0.4) = %v, want at least 1", got)
	}
}

// The capacity measurement drives the server closed-loop: with rate 0 and
// N workers, never more than N requests are in flight, and each worker
// sends its next request as soon as the last is answered.
func TestLoadGenClosedLoopKeepsWorkersRequestsInFlight(t *testing.T) {
	var inFlight, peak atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inFlight.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(5 * time.Millisecond)
		inFlight.Add(-1)
		w.Write([]byte("ok"))
	}))
	defer srv.Close()
	var out bytes.Buffer
	if err := LoadGen(&out, LoadSpec{Base: srv.URL, Duration: 300 * time.Millisecond, Workers: 3, MixSeed: 1}); err != nil {
		t.Fatal(err)
	}
	n := strings.Count(out.String(), "\n")
	// Never more than 3 in flight, and each worker sent again after its
	// answer (more requests than workers); how many fit in 300 ms is the
	// machine's business, not asserted.
	if peak.Load() > 3 || n <= 3 {
		t.Errorf("peak %d in flight, %d requests; want <= 3 in flight and more than 3 requests", peak.Load(), n)
	}
	if err := LoadGen(&out, LoadSpec{Base: srv.URL, Duration: time.Second, Workers: -1, MixSeed: 1}); err == nil {
		t.Error("negative workers accepted")
	}
}

// The tenant targeter sends t0 its share of the requests, every other
// tenant an even share of the rest, and keeps the mix's kind.
func TestTenantTargeterSharesTheRequests(t *testing.T) {
	tr := tenantTargeter(mixTargeter([2]vegeta.Target{{URL: "/small"}, {URL: "/large"}}, smallShare, 1), 10, 0.4, 3)
	counts := map[string]int{}
	large := 0
	const n = 20000
	for range n {
		var tg vegeta.Target
		if err := tr(&tg); err != nil {
			t.Fatal(err)
		}
		url, tenant, ok := strings.Cut(tg.URL, "?tenant=")
		if !ok {
			t.Fatalf("URL %q carries no tenant", tg.URL)
		}
		counts[tenant]++
		if url == "/large" {
			large++
		}
	}
	if s := float64(counts["t0"]) / n; s < 0.38 || s > 0.42 {
		t.Errorf("t0 sent %.3f of the requests, want 0.40", s)
	}
	for k := 1; k < 10; k++ {
		if s := float64(counts[fmt.Sprint("t", k)]) / n; s < 0.055 || s > 0.078 {
			t.Errorf("t%d sent %.3f of the requests, want 0.0667", k, s)
		}
	}
	if s := float64(large) / n; s < 0.09 || s > 0.11 {
		t.Errorf("%.3f of the requests large, want the mix's 0.10", s)
	}
}

// --only-large sends every request to /large (the mixed-urgency
// scenarios' batch clients); with --only-small it is refused.
func TestLoadGenOnlyLarge(t *testing.T) {
	var large, small atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/large" {
			large.Add(1)
		} else {
			small.Add(1)
		}
	}))
	defer srv.Close()
	var out bytes.Buffer
	if err := LoadGen(&out, LoadSpec{Base: srv.URL, Duration: 100 * time.Millisecond, Workers: 2, OnlyLarge: true, MixSeed: 1}); err != nil {
		t.Fatal(err)
	}
	if large.Load() == 0 || small.Load() != 0 || strings.Contains(out.String(), `"kind":"small"`) {
		t.Errorf("%d large, %d small requests: want only large", large.Load(), small.Load())
	}
	if err := LoadGen(&out, LoadSpec{Base: srv.URL, Duration: time.Second, Workers: 1, OnlyLarge: true, OnlySmall: true}); err == nil {
		t.Error("--only-small with --only-large accepted")
	}
}
