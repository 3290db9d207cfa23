package cpuworkhttp_test

import (
	"context"
	"errors"

	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cpuwork/cpuwork"
	"github.com/cpuwork/cpuwork/cpuworkhttp"
)

func newExecutor(t *testing.T, o cpuwork.Options) *cpuwork.Executor {
	t.Helper()
	e, err := cpuwork.New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(context.Background()) })
	return e
}

// gate is a handler that holds its slot until released.
type gate struct {
	started chan struct{}
	release chan struct{}
	running atomic.Int32
	most    atomic.Int32
}

func newGate() *gate {
	return &gate{started: make(chan struct{}, 16), release: make(chan struct{})}
}

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := g.running.Add(1)
	for {
		m := g.most.Load()
		if n <= m || g.most.CompareAndSwap(m, n) {
			break
		}
	}
	g.started <- struct{}{}
	<-g.release
	g.running.Add(-1)
	io.WriteString(w, "done")
}

// holding serves /hold through g and every other path through next.
func holding(g *gate, next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			g.ServeHTTP(w, r)
			return
		}
		next(w, r)
	})
}

func get(t *testing.T, url string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestRequestsRunOnlyWhileHoldingASlot(t *testing.T) {
	e := newExecutor(t, cpuwork.Options{Slots: 1})
	g := newGate()
	srv := httptest.NewServer(cpuworkhttp.Handler(e, g, cpuworkhttp.Options{}))
	defer srv.Close()
	var wg sync.WaitGroup
	codes := make(chan int, 3)
	for range 3 {
		wg.Go(func() {
			resp, body := get(t, srv.URL, nil)
			if body != "done" {
				t.Errorf("body %q", body)
			}
			codes <- resp.StatusCode
		})
	}
	for range 3 {
		<-g.started
		// Give the other requests time to start too if they could.
		time.Sleep(20 * time.Millisecond)
		if n := g.running.Load(); n != 1 {
			t.Errorf("%d handlers run at once on 1 slot", n)
		}
		g.release <- struct{}{}
	}
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != http.StatusOK {
			t.Errorf("status %d", c)
		}
	}
	if m := g.most.Load(); m != 1 {
		t.Errorf("at most %d handlers ran at once, want 1", m)
	}
}

// countingBody counts reads of a request body.
type countingBody struct{ reads *atomic.Int32 }

func (b countingBody) Read(p []byte) (int, error) {
	b.reads.Add(1)
	return 0, io.EOF
}

// one is a queue of one task per class.
var one = [4]cpuwork.ClassOptions{{QueueLimit: 1}, {QueueLimit: 1}, {QueueLimit: 1}, {QueueLimit: 1}}

func TestRefusedRequestGets503WithRetryAfterAndItsBodyIsNeverRead(t *testing.T) {
	e := newExecutor(t, cpuwork.Options{Slots: 1, Classes: one})
	g := newGate()
	var served atomic.Int32
	h := holding(g, func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		io.ReadAll(r.Body)
	})
	m := cpuworkhttp.Handler(e, h, cpuworkhttp.Options{})
	srv := httptest.NewServer(m)
	defer srv.Close()
	var wg sync.WaitGroup
	wg.Go(func() { get(t, srv.URL+"/hold", nil) })
	<-g.started
	wg.Go(func() { get(t, srv.URL+"/hold", nil) }) // fills the queue of 1
	waitFor(t, func() bool { return e.Stats().Classes[cpuwork.Interactive].Queued == 1 })

	// Served in process so the body's reads are seen.
	var reads atomic.Int32
	req := httptest.NewRequest("POST", "/work", countingBody{&reads})
	rec := httptest.NewRecorder()
	m.ServeHTTP(rec, req)
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("refused request: status %d, want 503", rec.Code)
	}
	if ra := rec.Header().Get("Retry-After"); ra != "1" {
		t.Errorf("Retry-After %q, want 1", ra)
	}
	if n := reads.Load(); n != 0 {
		t.Errorf("the refused request's body was read %d times", n)
	}
	if served.Load() != 0 {
		t.Error("the refused request's handler ran")
	}
	g.release <- struct{}{}
	<-g.started
	g.release <- struct{}{}
	wg.Wait()
}

func TestShedStatusAndRetryAfterAreConfigurable(t *testing.T) {
	e := newExecutor(t, cpuwork.Options{Slots: 1, Classes: one})
	g := newGate()
	for _, tc := range []struct {
		o      cpuworkhttp.Options
		status int
		retry  string
	}{
		{cpuworkhttp.Options{ShedStatus: http.StatusTooManyRequests, RetryAfter: 2500 * time.Millisecond}, 429, "3"},
		{cpuworkhttp.Options{RetryAfter: -1}, 503, ""},
	} {
		m := cpuworkhttp.Handler(e, g, tc.o)
		var wg sync.WaitGroup
		wg.Go(func() { m.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil)) })
		<-g.started
		wg.Go(func() { m.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil)) })
		waitFor(t, func() bool { return e.Stats().Classes[cpuwork.Interactive].Queued == 1 })
		rec := httptest.NewRecorder()
		m.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		if rec.Code != tc.status || rec.Header().Get("Retry-After") != tc.retry {
			t.Errorf("%+v: status %d Retry-After %q, want %d %q", tc.o, rec.Code, rec.Header().Get("Retry-After"), tc.status, tc.retry)
		}
		g.release <- struct{}{}
		<-g.started
		g.release <- struct{}{}
		wg.Wait()
	}
}

func TestPanicIsAnswered500AndTheSlotIsKept(t *testing.T) {
	e := newExecutor(t, cpuwork.Options{Slots: 1})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/panic":
			panic("boom")
		case "/abort":
			panic(http.ErrAbortHandler)
		}
		io.WriteString(w, "ok")
	})
	var logged strings.Builder
	var mu sync.Mutex
	log := slogTo(&mu, &logged)
	srv := httptest.NewServer(cpuworkhttp.Handler(e, h, cpuworkhttp.Options{Logger: log}))
	defer srv.Close()
	for range 3 { // more panics than slots: a lost slot would hang the next request
		resp, _ := get(t, srv.URL+"/panic", nil)
		if resp.StatusCode != http.StatusInternalServerError {
			t.Fatalf("panicking handler: status %d, want 500", resp.StatusCode)
		}
	}
	if _, err := http.Get(srv.URL + "/abort"); err == nil {
		t.Error("http.ErrAbortHandler: the response was completed, want it aborted")
	}
	resp, body := get(t, srv.URL+"/", nil)
	if resp.StatusCode != 200 || body != "ok" {
		t.Errorf("after the panics: %d %q", resp.StatusCode, body)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logged.String(), "boom") {
		t.Errorf("the panic was not logged: %q", logged.String())
	}
	// net/http's client retries an aborted GET once: 3 panics and 1-2 aborts.
	if n := e.Stats().Classes[cpuwork.Interactive].Panicked; n < 4 || n > 5 {
		t.Errorf("Panicked %d, want 4 or 5", n)
	}
}

func TestClientTimeoutHeaderRefusesARequestThatCannotFinishInTime(t *testing.T) {
	e := newExecutor(t, cpuwork.Options{Slots: 1})
	g := newGate()
	var served atomic.Int32
	h := holding(g, func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		if _, ok := r.Context().Deadline(); !ok && r.Header.Get("Request-Timeout") == "2" {
			t.Error("the handler's context has no deadline from the header")
		}
	})
	m := cpuworkhttp.Handler(e, h, cpuworkhttp.Options{
		TimeoutHeader: "Request-Timeout",
		Service:       func(*http.Request) time.Duration { return 200 * time.Millisecond },
	})
	srv := httptest.NewServer(m)
	defer srv.Close()
	var wg sync.WaitGroup
	wg.Go(func() { get(t, srv.URL+"/hold", nil) })
	<-g.started
	start := time.Now()
	resp, _ := get(t, srv.URL+"/work", map[string]string{"Request-Timeout": "50ms"})
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("a 200 ms request with 50 ms left behind a busy slot: status %d, want 503", resp.StatusCode)
	}
	if d := time.Since(start); d > 40*time.Millisecond {
		t.Logf("refused after %v (the door refuses at arrival; a slow machine may add)", d)
	}
	if st := e.Stats().Classes[cpuwork.Interactive]; st.Shed == 0 {
		t.Errorf("not counted as shed: %+v", st)
	}
	g.release <- struct{}{}
	wg.Wait()
	// With the slot free, the same request runs, its deadline in its context.
	resp, _ = get(t, srv.URL+"/work", map[string]string{"Request-Timeout": "2"})
	if resp.StatusCode != 200 || served.Load() != 1 {
		t.Errorf("free slot: status %d, served %d", resp.StatusCode, served.Load())
	}
	// A malformed header is ignored.
	resp, _ = get(t, srv.URL+"/work", map[string]string{"Request-Timeout": "soon"})
	if resp.StatusCode != 200 {
		t.Errorf("malformed header: status %d, want 200 (ignored)", resp.StatusCode)
	}
}

func TestObjectiveAndServiceReachTheTasksContext(t *testing.T) {
	e := newExecutor(t, cpuwork.Options{Slots: 1})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The handler's context is the task's: Checkpoint accepts it.
		if err := cpuwork.Checkpoint(r.Context()); err != nil {
			t.Errorf("Checkpoint: %v", err)
		}
	})
	m := cpuworkhttp.Handler(e, h, cpuworkhttp.Options{Objective: time.Second})
	rec := httptest.NewRecorder()
	m.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != 200 {
		t.Errorf("status %d", rec.Code)
	}
}

func TestClassPerRequest(t *testing.T) {
	e := newExecutor(t, cpuwork.Options{Slots: 2})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.URL.Path) })
	m := cpuworkhttp.Handler(e, h, cpuworkhttp.Options{Class: func(r *http.Request) cpuwork.Class {
		switch r.URL.Path {
		case "/batch":
			return cpuwork.Batch
		case "/bad":
			return cpuwork.Class(9)
		}
		return cpuwork.Interactive
	}})
	srv := httptest.NewServer(m)
	defer srv.Close()
	for _, p := range []string{"/batch", "/x", "/batch"} {
		if resp, body := get(t, srv.URL+p, nil); resp.StatusCode != 200 || body != p {
			t.Errorf("%s: %d %q", p, resp.StatusCode, body)
		}
	}
	st := e.Stats()
	if st.Classes[cpuwork.Batch].Completed != 2 || st.Classes[cpuwork.Interactive].Completed != 1 {
		t.Errorf("completed: batch %d interactive %d, want 2 and 1", st.Classes[cpuwork.Batch].Completed, st.Classes[cpuwork.Interactive].Completed)
	}
	if resp, _ := get(t, srv.URL+"/bad", nil); resp.StatusCode != http.StatusInternalServerError {
		t.Errorf("invalid class: status %d, want 500", resp.StatusCode)
	}
}

func TestClosedExecutorAnswers503AndClosesTheConnection(t *testing.T) {
	e := newExecutor(t, cpuwork.Options{Slots: 1})
	e.Close(context.Background())
	rec := httptest.NewRecorder()
	cpuworkhttp.Handler(e, http.NotFoundHandler(), cpuworkhttp.Options{}).ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != 503 || rec.Header().Get("Connection") != "close" {
		t.Errorf("status %d Connection %q, want 503 close", rec.Code, rec.Header().Get("Connection"))
	}
}

func TestServeWatchesTheListener(t *testing.T) {
	e := newExecutor(t, cpuwork.Options{Slots: 1})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: cpuworkhttp.Handler(e, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hi")
	}), cpuworkhttp.Options{})}
	done := make(chan error, 1)
	go func() { done <- cpuworkhttp.Serve(srv, ln) }()
	resp, body := get(t, "http://"+ln.Addr().String()+"/", nil)
	if resp.StatusCode != 200 || body != "hi" {
		t.Errorf("%d %q", resp.StatusCode, body)
	}
	srv.Shutdown(context.Background())
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Serve returned %v", err)
	}
}

func TestListenAndServeReportsAListenError(t *testing.T) {
	err := cpuworkhttp.ListenAndServe(&http.Server{Addr: "127.0.0.1:-1"})
	if err == nil {
		t.Fatal("an invalid address served")
	}
}

func TestNilArgumentsPanic(t *testing.T) {
	e := newExecutor(t, cpuwork.Options{Slots: 1})
	for name, f := range map[string]func(){
		"executor": func() { cpuworkhttp.Handler(nil, http.NotFoundHandler(), cpuworkhttp.Options{}) },
		"handler":  func() { cpuworkhttp.Handler(e, nil, cpuworkhttp.Options{}) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("nil %s: no panic", name)
				}
			}()
			f()
		}()
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 5 s")
		}
		time.Sleep(time.Millisecond)
	}
}

func slogTo(mu *sync.Mutex, b *strings.Builder) *slog.Logger {
	return slog.New(slog.NewTextHandler(lockedWriter{mu, b}, nil))
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// Options.Key charges a request that queues to its key (Stats.Keys).
func TestKeyPerRequest(t *testing.T) {
	e := newExecutor(t, cpuwork.Options{Slots: 1})
	gate, entered := make(chan struct{}), make(chan struct{}, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/block" {
			entered <- struct{}{}
			<-gate
		}
		time.Sleep(time.Millisecond)
	})
	m := cpuworkhttp.Handler(e, h, cpuworkhttp.Options{Key: func(r *http.Request) string { return r.Header.Get("X-Tenant") }})
	srv := httptest.NewServer(m)
	defer srv.Close()
	send := func(path, tenant string) {
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		req.Header.Set("X-Tenant", tenant)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	go send("/block", "")
	<-entered
	done := make(chan struct{})
	for range 2 {
		go func() {
			send("/x", "tenant-a")
			done <- struct{}{}
		}()
	}
	for e.Stats().Classes[cpuwork.Interactive].Queued < 2 {
		time.Sleep(100 * time.Microsecond)
	}
	close(gate)
	<-done
	<-done
	st := e.Stats()
	if len(st.Keys) != 1 || st.Keys[0].Key != "tenant-a" || st.Keys[0].SlotTime < 2*time.Millisecond {
		t.Errorf("Stats.Keys %+v: want tenant-a with its two requests' slot time", st.Keys)
	}
}
