package cpuworkhttp_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cpuwork/cpuwork"
	"github.com/cpuwork/cpuwork/cpuworkhttp"
)

// seen is what a handler saw of a request.
type seen struct {
	Method, Path, RawPath, RequestURI, Query string
	Header                                   http.Header
}

// recorder answers every request with what it saw of it, and records it.
func recorder(got chan<- seen) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := r.Header.Clone()
		got <- seen{r.Method, r.URL.Path, r.URL.RawPath, r.RequestURI, r.URL.RawQuery, h}
		fmt.Fprintf(w, "%s %s", r.Method, r.RequestURI)
	})
}

// rawRequest sends one request line and headers as they are over a
// fresh connection and returns the status line and body.
func rawRequest(t *testing.T, addr, line string) (status, body string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "%s\r\nHost: example.test\r\nX-Odd:  spaced  \r\nConnection: close\r\n\r\n", line)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.Status, string(b)
}

// The middleware changes nothing of an admitted request: paths that are
// not clean (double slashes, encoded slashes, a trailing slash, "."
// and ".." segments, a URL inside the path) reach the server's handler
// byte for byte as without it — method, path, raw path, request URI,
// query and headers — and are answered the same, with no redirect.
func TestUncleanPathsReachTheHandlerUnchanged(t *testing.T) {
	e := newExecutor(t, cpuwork.Options{Slots: 2})
	lines := []string{
		"GET /plain/local:///small.jpg HTTP/1.1",
		"GET /unsafe/rs:fit:300/plain/http://host/x.jpg?w=1 HTTP/1.1",
		"GET //double//slashes// HTTP/1.1",
		"GET /a/%2F/b%2Fc?q=%2F HTTP/1.1",
		"GET /dir/ HTTP/1.1",
		"GET /a/./b/../c HTTP/1.1",
		"POST /../escape HTTP/1.1",
		"DELETE /objects/key%20with%20spaces/ HTTP/1.1",
		"GET /debug//pprof/ HTTP/1.1",
	}
	var want, got []seen
	var wantAns, gotAns []string
	for _, wrapped := range []bool{false, true} {
		ch := make(chan seen, len(lines))
		var h http.Handler = recorder(ch)
		if wrapped {
			h = cpuworkhttp.Handler(e, h, cpuworkhttp.Options{Objective: time.Second})
		}
		srv := httptest.NewServer(h)
		for _, l := range lines {
			st, body := rawRequest(t, srv.Listener.Addr().String(), l)
			s := <-ch
			if wrapped {
				got, gotAns = append(got, s), append(gotAns, st+" "+body)
			} else {
				want, wantAns = append(want, s), append(wantAns, st+" "+body)
			}
		}
		srv.Close()
	}
	for i, l := range lines {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Errorf("%s: the handler saw\n%+v\nbehind the middleware, and without it\n%+v", l, got[i], want[i])
		}
		if gotAns[i] != wantAns[i] {
			t.Errorf("%s: answered %q behind the middleware, %q without it", l, gotAns[i], wantAns[i])
		}
	}
}

// Requests under /debug/ are served while every slot is held and its
// queue is full (they bypass admission by default), and a Bypass of the
// user's own names other paths; everything else waits for a slot.
func TestDebugPathsBypassAdmission(t *testing.T) {
	e := newExecutor(t, cpuwork.Options{Slots: 1, Classes: [4]cpuwork.ClassOptions{cpuwork.Interactive: {QueueLimit: 1}}})
	g := newGate()
	inner := holding(g, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "served "+r.URL.Path) })
	for _, tc := range []struct {
		name   string
		o      cpuworkhttp.Options
		bypass []string
		admit  []string
	}{
		{"default", cpuworkhttp.Options{}, []string{"/debug/pprof/", "/debug/cpuwork"}, []string{"/healthz", "/debugger"}},
		{"PathPrefix", cpuworkhttp.Options{Bypass: cpuworkhttp.PathPrefix("/healthz", "/debug/")}, []string{"/healthz", "/debug/vars"}, []string{"/work"}},
		{"none", cpuworkhttp.Options{Bypass: func(*http.Request) bool { return false }}, nil, []string{"/debug/pprof/"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(cpuworkhttp.Handler(e, inner, tc.o))
			defer srv.Close()
			done := make(chan struct{})
			go func() { defer close(done); get(t, srv.URL+"/hold", nil) }()
			<-g.started
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			for _, p := range tc.bypass {
				req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+p, nil)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatalf("%s with every slot held: %v, want it served at once", p, err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || string(b) != "served "+p {
					t.Errorf("%s with every slot held: %d %q, want 200 %q", p, resp.StatusCode, b, "served "+p)
				}
			}
			for _, p := range tc.admit {
				short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
				req, _ := http.NewRequestWithContext(short, "GET", srv.URL+p, nil)
				resp, err := http.DefaultClient.Do(req)
				cancel()
				if err == nil {
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode == 200 && strings.HasPrefix(string(b), "served") {
						t.Errorf("%s with every slot held: served at once, want it admitted (queued or refused)", p)
					}
				}
			}
			g.release <- struct{}{}
			<-done
		})
	}
}
