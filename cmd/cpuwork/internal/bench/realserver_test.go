package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The lines a realbench server prints at its end reach the run's extras:
// the latency split per class by its lower-case name, the pacer's and
// the guard's figures, and no other line.
func TestRealServerReportLines(t *testing.T) {
	var s realServer
	for _, line := range []string{
		"abandoned small=3 large=1\n",
		"pacing paced=1 target=0.970 closed_s=0.512 lowered=0 held=2 occupancy=1.700\n",
		"split class=Interactive submitted=900 rejected=480 shed=470 wait_p50_ms=9.7 wait_p99_ms=147.0 slot_p50_ms=8.7 slot_p99_ms=61.9 slot_s=3.210\n",
		"split class=Batch submitted=4 rejected=0 shed=0 wait_p50_ms=0.0 wait_p99_ms=1.0 slot_p50_ms=500.0 slot_p99_ms=520.0 slot_s=2.000\n",
		"demotion suspensions=1 promotions=2 retired=0 starved_s=0.004\n",
		"listening 127.0.0.1:1234\n",
	} {
		s.report(line)
	}
	if s.abandoned["small"] != 3 || s.abandoned["large"] != 1 {
		t.Errorf("abandoned = %v", s.abandoned)
	}
	if s.pacing["held"] != 2 || s.pacing["closed_s"] != 0.512 {
		t.Errorf("pacing = %v", s.pacing)
	}
	if s.demotion["suspensions"] != 1 {
		t.Errorf("demotion = %v", s.demotion)
	}
	if got := s.split["interactive"]; got["wait_p99_ms"] != 147 || got["slot_p50_ms"] != 8.7 || got["shed"] != 470 {
		t.Errorf("interactive split = %v", got)
	}
	if got := s.split["batch"]; got["slot_p99_ms"] != 520 {
		t.Errorf("batch split = %v", got)
	}
	if len(s.split) != 2 {
		t.Errorf("split has %d classes, want 2: %v", len(s.split), s.split)
	}
}

// A request kind is measured over at least costWork of CPU: many short
// requests, a few long ones, never fewer than asked nor more than
// costMax.
func TestCostCountCoversTheWork(t *testing.T) {
	for _, c := range []struct {
		one   float64
		least int
		want  int
	}{
		{0.0017, 5, 177}, // OPA's small query
		{0.45, 5, 5},     // its large one
		{0.00001, 5, costMax},
		{0, 5, 5},
		{0.1, 5, 5},
		{0.05, 5, 6},
	} {
		if got := costCount(c.one, c.least); got != c.want {
			t.Errorf("costCount(%v, %d) = %d, want %d", c.one, c.least, got, c.want)
		}
	}
}

// A server that dies during or at the end of its run (libvips crashed
// with SIGSEGV in bimg's vipsSave) is seen, so the run says so instead of
// counting silently; one that ends at its stdin's EOF, as asked, is not.
func TestARealServerThatDiesIsSeen(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name, script string
		died         bool
	}{
		{"crashes", "echo 'listening 127.0.0.1:1'\nkill -SEGV $$\n", true},
		{"exits 2", "echo 'listening 127.0.0.1:1'\nexit 2\n", true},
		{"ends at EOF", "echo 'listening 127.0.0.1:1'\ncat >/dev/null\necho 'abandoned small=1'\n", false},
	} {
		bin := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-"))
		if err := os.WriteFile(bin, []byte("#!/bin/sh\n"+c.script), 0o755); err != nil {
			t.Fatal(err)
		}
		s, err := startReal("", bin, nil, "stock", "http://127.0.0.1:1", time.Second)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		time.Sleep(50 * time.Millisecond) // the run
		s.stop()
		if err := s.died(); (err != nil) != c.died {
			t.Errorf("a server that %s: died() = %v, want an error %v", c.name, err, c.died)
		}
	}
}

// TestTraceOutMakesItsDirectory: a trace directory nobody made is made,
// so that the observe variant's server can write its trace there (a run
// lost every trace to it once); one that cannot be made is an error.
func TestTraceOutMakesItsDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "traces", "run1")
	path, err := traceOut(dir, "realserver-vips", "cpuwork-observe+quota1.5@79%", 3)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "realserver-vips-cpuwork-observe-quota1.5-79pct-pair3.csv"); path != want {
		t.Fatalf("path %q, want %q", path, want)
	}
	if err := os.WriteFile(path, []byte("arrival_ms\n"), 0o644); err != nil {
		t.Fatalf("the server could not write its trace: %v", err)
	}
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := traceOut(filepath.Join(file, "under"), "s", "v", 1); err == nil {
		t.Fatal("a directory under a file: no error")
	}
}
