package doctor

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cpuwork/cpuwork/schedstat"
)

// The doctor stays on its target: a /debug/cpuwork or pprof source that
// redirects (to another host, to another scheme, in a loop) is not
// followed, and the error says it was a redirect and where to; what the
// other host serves is never read as the target's.
func TestTheDoctorFollowsNoRedirect(t *testing.T) {
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(schedstat.Report{Sample: schedstat.Sample{Interval: time.Second, GOMAXPROCS: 64}})
	}))
	defer other.Close()
	for _, to := range []string{other.URL + "/debug/cpuwork", "file:///etc/passwd", "/debug/cpuwork"} {
		target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, to, http.StatusFound)
		}))
		s, _, err := fetch(context.Background(), target.URL)
		if s != nil || err == nil || !strings.Contains(err.Error(), "redirect") || !strings.Contains(err.Error(), to) {
			t.Errorf("/debug/cpuwork redirecting to %s: sample %v, err %v; want no sample and an error naming the redirect", to, s, err)
		}
		_, body, err := pprofGet(context.Background(), target.URL, "profile", time.Second)
		if body != nil {
			body.Close()
		}
		if err == nil || !strings.Contains(err.Error(), "redirect") {
			t.Errorf("/debug/pprof/profile redirecting to %s: %v; want an error naming the redirect", to, err)
		}
		target.Close()
	}
}

// rawServer answers every connection with answer (given the request
// line), on loopback; it stops when the test ends.
func rawServer(t *testing.T, answer func(c net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				bufio.NewReader(c).ReadString('\n')
				answer(c)
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// A probe answered with a redirect is answered; one whose answer is
// refused by the client (malformed, headers over the client's bound) is
// "not answered" with the reason, never counted as timed out; and none
// of these is an unresponsive target.
func TestARefusedOrMalformedAnswerIsNotATimeout(t *testing.T) {
	for _, c := range []struct {
		name     string
		answer   func(c net.Conn)
		answered bool
		why      string
	}{
		{"a redirect elsewhere", func(c net.Conn) {
			fmt.Fprint(c, "HTTP/1.1 302 Found\r\nLocation: http://127.0.0.2:1/\r\nContent-Length: 0\r\n\r\n")
		}, true, ""},
		{"a redirect loop", func(c net.Conn) {
			fmt.Fprint(c, "HTTP/1.1 302 Found\r\nLocation: /\r\nContent-Length: 0\r\n\r\n")
		}, true, ""},
		{"a malformed answer", func(c net.Conn) { fmt.Fprint(c, "not http at all\r\n\r\n") }, false, "malformed"},
		{"a 2 MiB header", func(c net.Conn) {
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nX-Big: %s\r\nContent-Length: 0\r\n\r\n", strings.Repeat("a", 2<<20))
		}, false, "header"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := probe(context.Background(), rawServer(t, c.answer), 2, 200*time.Millisecond, time.Second)
			if p.TimedOut != 0 {
				t.Errorf("%+v: counted as timed out", p)
			}
			if c.answered && p.Answered != 2 {
				t.Errorf("%+v: want both answered", p)
			}
			if !c.answered && (p.Failed != 2 || len(p.Why) == 0 || !strings.Contains(strings.Join(p.Why, " "), c.why)) {
				t.Errorf("%+v: want both not answered, the reason naming %q", p, c.why)
			}
			w := &Window{Probes: p, Duration: time.Second}
			for _, f := range diagnose(w) {
				if f.ID == "unresponsive" || f.ID == "slow-to-answer" {
					t.Errorf("finding %s (%s) for %s", f.ID, f.Summary, c.name)
				}
			}
		})
	}
}

// A target that starts its answers at once and trickles its headers is
// "slow to send headers", not CPU-bound: no unresponsive or slow-to-
// answer finding with a CPU-bound fix.
func TestATargetThatTricklesItsHeadersIsSlowToSendThem(t *testing.T) {
	base := rawServer(t, func(c net.Conn) {
		fmt.Fprint(c, "HTTP/1.1 200 OK\r\n")
		for range 30 {
			time.Sleep(50 * time.Millisecond)
			if _, err := fmt.Fprint(c, "X-Slow: 1\r\n"); err != nil {
				return
			}
		}
		fmt.Fprint(c, "Content-Length: 0\r\n\r\n")
	})
	p := probe(context.Background(), base, 2, 100*time.Millisecond, 500*time.Millisecond)
	if p.SlowHeaders != 2 {
		t.Errorf("%+v: want both probes slow to send headers", p)
	}
	w := &Window{Probes: p, Duration: time.Second, CPUCores: 2}
	var ids []string
	for _, f := range diagnose(w) {
		ids = append(ids, f.ID)
	}
	if strings.Contains(strings.Join(ids, " "), "unresponsive") || strings.Contains(strings.Join(ids, " "), "slow-to-answer") || !strings.Contains(strings.Join(ids, " "), "slow-to-send-headers") {
		t.Errorf("findings %v: want slow-to-send-headers, no unresponsive or slow-to-answer", ids)
	}
}
