package cpuworkhttp_test

import (
	"bufio"
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cpuwork/cpuwork"
	"github.com/cpuwork/cpuwork/cpuworkhttp"
)

// start starts srv over HTTP/2 (TLS) or HTTP/1.1, closed when t ends.
func start(t *testing.T, srv *httptest.Server, h2 bool) {
	srv.EnableHTTP2 = h2
	if h2 {
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
}

// interfaces reports which optional interfaces w has, as a handler's type
// assertions see them.
func interfaces(w http.ResponseWriter) map[string]bool {
	_, f := w.(http.Flusher)
	_, h := w.(http.Hijacker)
	_, rf := w.(io.ReaderFrom)
	_, sw := w.(io.StringWriter)
	_, p := w.(http.Pusher)
	return map[string]bool{"Flusher": f, "Hijacker": h, "ReaderFrom": rf, "StringWriter": sw, "Pusher": p}
}

// The handler behind the middleware sees the same optional interfaces as
// the server's own writer, over HTTP/1.1 (Flusher, Hijacker, ReaderFrom,
// StringWriter) and HTTP/2 (Flusher, StringWriter, Pusher).
func TestTheWriterKeepsEveryOptionalInterface(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		name := "HTTP/1.1"
		if h2 {
			name = "HTTP/2"
		}
		t.Run(name, func(t *testing.T) {
			e := newExecutor(t, cpuwork.Options{Slots: 2})
			seen := make(chan [2]map[string]bool, 1)
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				var inner map[string]bool
				cpuworkhttp.Handler(e, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					inner = interfaces(w)
				}), cpuworkhttp.Options{}).ServeHTTP(w, r)
				seen <- [2]map[string]bool{interfaces(w), inner}
			}))
			start(t, srv, h2)
			resp, err := srv.Client().Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if h2 != (resp.ProtoMajor == 2) {
				t.Fatalf("served over %s", resp.Proto)
			}
			got := <-seen
			for k, v := range got[0] {
				if got[1][k] != v {
					t.Errorf("%s: the server's writer has it %v, the handler's %v", k, v, got[1][k])
				}
			}
		})
	}
}

// A WebSocket-style upgrade through w.(http.Hijacker): the handler answers
// 101 on the hijacked connection and echoes a line; the slot is released
// when the handler returns, and a panic after the hijack writes nothing
// more to the connection.
func TestAnUpgradeHijacksTheConnection(t *testing.T) {
	e := newExecutor(t, cpuwork.Options{Slots: 1})
	srv := httptest.NewServer(cpuworkhttp.Handler(e, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hj, ok := w.(http.Hijacker)
		if !ok {
			http.Error(w, "no hijacker", http.StatusInternalServerError)
			return
		}
		conn, brw, err := hj.Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		line, _ := brw.ReadString('\n')
		brw.WriteString("echo " + line)
		brw.Flush()
	}), cpuworkhttp.Options{}))
	defer srv.Close()
	for range 2 { // the second one needs the slot the first released
		conn, err := net.DialTimeout("tcp", strings.TrimPrefix(srv.URL, "http://"), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("upgrade answered %s", resp.Status)
		}
		io.WriteString(conn, "hello\n")
		if line, err := br.ReadString('\n'); err != nil || line != "echo hello\n" {
			t.Fatalf("echo %q, %v", line, err)
		}
		conn.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.Close(ctx); err != nil {
		t.Errorf("a slot stayed held after the hijacking handler returned: %v", err)
	}
}

// A handler that panics after it began its answer is not answered as a
// success: the middleware releases the slot and aborts the response
// (http.ErrAbortHandler), so the client sees an error, as without the
// middleware — on HTTP/1.1 with and without a flush before the panic,
// and on HTTP/2. The panic is logged and the slot is back.
func TestAPanicAfterWritingAbortsTheResponse(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		for _, flush := range []bool{false, true} {
			name := map[bool]string{false: "HTTP/1.1", true: "HTTP/2"}[h2] + map[bool]string{false: "", true: " flushed"}[flush]
			t.Run(name, func(t *testing.T) {
				e := newExecutor(t, cpuwork.Options{Slots: 1})
				h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.URL.Path == "/ok" {
						io.WriteString(w, "ok")
						return
					}
					io.WriteString(w, `{"items": [1, 2,`)
					if flush {
						w.(http.Flusher).Flush()
					}
					panic("mid-body")
				})
				var logged strings.Builder
				var mu sync.Mutex
				srv := httptest.NewUnstartedServer(cpuworkhttp.Handler(e, h, cpuworkhttp.Options{Logger: slogTo(&mu, &logged)}))
				srv.Config.ErrorLog = log.New(io.Discard, "", 0)
				start(t, srv, h2)
				resp, err := srv.Client().Get(srv.URL + "/json")
				if err == nil {
					body, rerr := io.ReadAll(resp.Body)
					resp.Body.Close()
					if rerr == nil {
						t.Fatalf("a panic after writing: the client got status %d and the body %q with no error, want the response aborted", resp.StatusCode, body)
					}
				}
				resp, err = srv.Client().Get(srv.URL + "/ok")
				if err != nil {
					t.Fatalf("after the panic: %v", err)
				}
				resp.Body.Close()
				mu.Lock()
				defer mu.Unlock()
				if !strings.Contains(logged.String(), "mid-body") {
					t.Errorf("the panic was not logged: %q", logged.String())
				}
			})
		}
	}
}
