package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// block returns the lines of text between the line containing from and
// the next line containing to, each trimmed, the empty ones dropped.
func block(t *testing.T, text, from, to string) []string {
	t.Helper()
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		if !strings.Contains(l, from) {
			continue
		}
		var out []string
		for _, l := range lines[i+1:] {
			if strings.Contains(l, to) {
				return out
			}
			if l = strings.TrimSpace(l); l != "" {
				out = append(out, l)
			}
		}
	}
	t.Fatalf("no block from %q to %q", from, to)
	return nil
}

// README's adoption blocks are this program's: what a reader copies is
// what this test compiles and runs.
func TestREADMEShowsThisProgramsBlocks(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	fences := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(string(readme), -1)
	find := func(marker string) []string {
		for _, f := range fences {
			if strings.Contains(f[1], marker) {
				var out []string
				for _, l := range strings.Split(f[1], "\n") {
					if l = strings.TrimSpace(l); l != "" {
						out = append(out, l)
					}
				}
				return out
			}
		}
		t.Fatalf("README has no go block with %q", marker)
		return nil
	}
	for _, c := range []struct{ marker, from, to string }{
		{"cpuworkhttp.Handler(exec, mux", "// cpuwork: the adoption.", "// end cpuwork"},
		{"schedstat.Handler(sampler", "// cpuwork doctor:", "// end cpuwork doctor"},
	} {
		got, want := find(c.marker), block(t, string(src), c.from, c.to)
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("README's block\n%s\nis not examples/middleware's\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
	if n := len(block(t, string(src), "// cpuwork: the adoption.", "// end cpuwork")); n > 10 {
		t.Errorf("the adoption adds %d lines: want at most 10", n)
	}
}

// The program serves its work through the executor and its /debug/
// handlers (pprof, /debug/cpuwork) at once while every slot is busy
// and more work queues.
func TestTheProgramServesDebugBesideBusySlots(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- serve(ln) }()
	base := "http://" + ln.Addr().String()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	get := func(ctx context.Context, path string) (int, string, error) {
		req, _ := http.NewRequestWithContext(ctx, "GET", base+path, nil)
		resp, err := client.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}
	if code, body, err := get(context.Background(), "/hash?rounds=3"); err != nil || code != 200 || len(strings.TrimSpace(body)) != 16 {
		t.Fatalf("/hash: %d %q %v", code, body, err)
	}
	busy, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 8 { // more than the slots: they run and queue
		wg.Go(func() { get(busy, "/hash?rounds=100000") })
	}
	time.Sleep(200 * time.Millisecond)
	for _, p := range []string{"/debug/pprof/", "/debug/cpuwork"} {
		start := time.Now()
		code, body, err := get(context.Background(), p)
		if err != nil || code != 200 {
			t.Errorf("%s beside busy slots: %d %v", p, code, err)
		}
		if p == "/debug/cpuwork" && !strings.Contains(body, `"executor"`) {
			t.Errorf("/debug/cpuwork: no executor in %.200s", body)
		}
		t.Logf("%s answered in %v beside busy slots", p, time.Since(start).Round(time.Millisecond))
	}
	stop()
	wg.Wait()
	ln.Close()
	if err := <-served; err == nil {
		t.Error("serve returned nil after its listener closed")
	}
}
