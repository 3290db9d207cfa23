// Package cpuworkhttp admits HTTP requests through a cpuwork executor: a
// net/http middleware that runs each request's handler under a slot of its
// class, refuses the requests the executor cannot serve in time before
// their body is read, and answers them 503 with Retry-After.
//
// Adopting it is a wrapped handler and, optionally, a watched listener:
//
//	e, err := cpuwork.New(cpuwork.Options{})
//	if err != nil { ... }
//	h := cpuworkhttp.Handler(e, mux, cpuworkhttp.Options{Objective: time.Second})
//	err = cpuworkhttp.Serve(&http.Server{Handler: h}, ln)
//
// The server's own handler is wrapped as it is: no routing is added and
// no request is changed. Requests under /debug/ (net/http/pprof,
// schedstat.Handler) bypass admission by default, so that a diagnosis's
// requests never wait for a slot; Options.Bypass names others (health
// checks) or none.
//
// A request's handler runs as the task: cpuwork.Checkpoint(r.Context())
// inside it yields to more urgent work and returns the task's error when
// it should stop. Handlers that mostly wait (on a database, a downstream
// service) hold a slot while they wait; let them bypass admission
// (Options.Bypass) or wrap only their CPU-bound part with Executor.Do.
package cpuworkhttp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cpuwork/cpuwork"
	"github.com/cpuwork/cpuwork/loadreport"
	"github.com/felixge/httpsnoop"
)

// Options configures Handler. The zero value runs every request as
// Interactive with no latency objective beyond its context's deadline and
// answers a shed request 503 with "Retry-After: 1".
type Options struct {
	// Class returns a request's class; nil: cpuwork.Interactive for
	// every request. An invalid class is answered 500 (a programming
	// error in the function, logged).
	Class func(*http.Request) cpuwork.Class

	// Key returns a request's key (a tenant, an API key, a client:
	// cpuwork.WithKey): inside its class the slots are shared fairly
	// across keys by slot time, and a key past its share queues behind
	// the others and is refused first. nil, or "": no key.
	Key func(*http.Request) string

	// Objective is the latency objective of every request, counted from
	// its arrival at the middleware: the executor orders its queue by it,
	// refuses a request it expects to miss it (cpuwork.WithTarget; the
	// class's late budget lets a few through) and, unless the
	// executor's ClassOptions.MaxQueueWait sets the class's own, sheds while
	// its queue stands above two of its requests' slot times (within a
	// tenth and a half of the objective). 0: none.
	Objective time.Duration

	// Service returns a request's expected run time once it holds a slot
	// (cpuwork.Target.Service): the door's estimate of when a request
	// will end, which for a request far costlier than its class's
	// average (a large image, an expensive query) is otherwise the
	// average. nil or 0: the class's recent average slot time.
	Service func(*http.Request) time.Duration

	// TimeoutHeader names a request header carrying the client's own
	// timeout, relative to the request's arrival, as a Go duration
	// ("250ms", "1.5s") or a whole number of TimeoutUnit ("2"). The
	// request's context then ends at that deadline, and a request the
	// executor expects to finish after it is refused at once instead of
	// served too late. Malformed or non-positive values are ignored (the
	// request is served without one). "": no header is read.
	TimeoutHeader string

	// TimeoutUnit is the unit of a bare number in TimeoutHeader; 0: a
	// second. Set time.Millisecond for Envoy's
	// x-envoy-expected-rq-timeout-ms.
	TimeoutUnit time.Duration

	// ShedStatus is the status of a refused request; 0:
	// http.StatusServiceUnavailable (503). 429 suits a server that
	// refuses per client.
	ShedStatus int

	// RetryAfter is the Retry-After a refused request is told (RFC 9110
	// section 10.2.3; whole seconds, rounded up); 0: 1 s; negative: no
	// Retry-After header.
	RetryAfter time.Duration

	// Logger receives a handler's panic (with its stack) and a Class
	// function's invalid class; nil: slog.Default().
	Logger *slog.Logger

	// Bypass reports whether a request is served outside admission: its
	// handler runs at once on the request's goroutine, with no slot, no
	// queue and no refusal, and r reaches h as it came (the server's own
	// diagnostics — net/http/pprof, schedstat.Handler, health checks —
	// so that a diagnosis never waits behind the work it diagnoses).
	// nil: the requests whose path starts with "/debug/"
	// (PathPrefix("/debug/")); to admit every request, return false.
	Bypass func(*http.Request) bool

	// ReportLoad adds the executor's load to every response, refused and
	// bypassed ones too, in the endpoint-load-metrics header that Envoy
	// reads (loadreport.HeaderName, in Envoy's text format:
	// application_utilization, cpu_utilization, rps_fractional, eps;
	// package loadreport says what each means), so that a balancer by
	// load sends a full replica less. The queue is counted against
	// Objective. false: no header.
	ReportLoad bool
}

// PathPrefix returns a Bypass that serves outside admission the requests
// whose URL path (r.URL.Path, as the server parsed it, uncleaned) starts
// with any of prefixes.
func PathPrefix(prefixes ...string) func(*http.Request) bool {
	ps := slices.Clone(prefixes)
	return func(r *http.Request) bool {
		for _, p := range ps {
			if strings.HasPrefix(r.URL.Path, p) {
				return true
			}
		}
		return false
	}
}

// Handler returns h admitted through e: every request is submitted as a
// task of its class (Options.Class) whose function is h.ServeHTTP, so a
// request runs only while it holds a slot, in the executor's order
// (Critical first, Interactive and Batch by weight, earliest due first
// within a class).
//
// Before anything of the request is read, Executor.Allow asks the door:
// a request it refuses is answered at once with Options.ShedStatus and a
// Retry-After header, its body never read. A request allowed then queues
// (Executor.Do); the queue's own door may still refuse it, answered the
// same way.
//
// The handler sees r with its context replaced by the task's: it carries
// the request's target (Objective, Service, TimeoutHeader) and is what
// cpuwork.Checkpoint takes. A panic in h is recovered by the executor
// with its slot released and logged: answered 500 when nothing was
// written yet; once h wrote a header or a byte, flushed or hijacked,
// the response is aborted instead (a panic with http.ErrAbortHandler
// after the slot is released: net/http closes an HTTP/1.1 connection or
// resets an HTTP/2 stream), so a truncated answer never reaches the
// client as a success. h's own http.ErrAbortHandler is re-raised the
// same way, as net/http would without the middleware. A request whose client went away or whose deadline passed
// while it queued is answered 503 (the client, if still there, may
// retry). After Executor.Close began, requests are answered 503 with
// "Connection: close".
//
// The ResponseWriter h sees has every optional interface the server's has
// (http.Flusher, http.Hijacker, io.ReaderFrom, io.StringWriter,
// http.Pusher) and unwraps to it for http.ResponseController. A request
// holds its slot until h returns, hijacked or not: a handler that
// hijacks the connection for a long-lived protocol (a WebSocket) should
// hand it to a goroutine of its own and return, or be routed around the
// middleware.
//
// It panics if e or h is nil (programming errors).
func Handler(e *cpuwork.Executor, h http.Handler, o Options) http.Handler {
	if e == nil {
		panic("cpuworkhttp: Handler with a nil executor")
	}
	if h == nil {
		panic("cpuworkhttp: Handler with a nil handler")
	}
	if o.ShedStatus == 0 {
		o.ShedStatus = http.StatusServiceUnavailable
	}
	if o.RetryAfter == 0 {
		o.RetryAfter = time.Second
	}
	retry := ""
	if o.RetryAfter > 0 {
		retry = strconv.FormatInt(int64(math.Ceil(o.RetryAfter.Seconds())), 10)
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	if o.Bypass == nil {
		o.Bypass = PathPrefix("/debug/")
	}
	m := &handler{e: e, h: h, o: o, retry: retry, log: log}
	if o.ReportLoad {
		m.load = loadreport.New(e, o.Objective)
	}
	return m
}

type handler struct {
	e     *cpuwork.Executor
	h     http.Handler
	o     Options
	retry string
	log   *slog.Logger
	load  *loadreport.Reporter // nil: Options.ReportLoad is off
	// header is the last report in its header's text, formatted once
	// per report (it changes every 250 ms), not per response.
	header atomic.Pointer[loadHeader]
}

type loadHeader struct {
	rep  loadreport.Report
	text string
}

// loadHeader is the executor's load as the endpoint-load-metrics value.
func (m *handler) loadHeader() string {
	rep := m.load.Report()
	if h := m.header.Load(); h != nil && h.rep == rep {
		return h.text
	}
	h := &loadHeader{rep, rep.Header()}
	m.header.Store(h)
	return h.text
}

func (m *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if m.load != nil {
		w.Header().Set(loadreport.HeaderName, m.loadHeader())
	}
	if m.o.Bypass(r) {
		m.h.ServeHTTP(w, r)
		return
	}
	ctx := r.Context()
	if m.o.TimeoutHeader != "" {
		if d, ok := parseTimeout(r.Header.Get(m.o.TimeoutHeader), m.o.TimeoutUnit); ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, d)
			defer cancel()
		}
	}
	var t cpuwork.Target
	t.Latency = m.o.Objective
	if m.o.Service != nil {
		t.Service = m.o.Service(r)
	}
	if t.Latency > 0 || t.Service > 0 {
		ctx = cpuwork.WithTarget(ctx, t)
	}
	if m.o.Key != nil {
		if k := m.o.Key(r); k != "" {
			ctx = cpuwork.WithKey(ctx, k)
		}
	}
	c := cpuwork.Interactive
	if m.o.Class != nil {
		c = m.o.Class(r)
	}
	if err := m.e.Allow(ctx, c); err != nil {
		m.refused(w, r, c, err)
		return
	}
	rw, wrote := wrap(w)
	err := m.e.Do(ctx, c, func(ctx context.Context) error {
		m.h.ServeHTTP(rw, r.WithContext(ctx))
		return nil
	})
	if err == nil {
		return
	}
	var pe *cpuwork.PanicError
	if errors.As(err, &pe) {
		if pe.Value == http.ErrAbortHandler {
			panic(http.ErrAbortHandler)
		}
		m.log.Error("cpuworkhttp: handler panicked", "method", r.Method, "path", r.URL.Path, "panic", fmt.Sprint(pe.Value), "stack", string(pe.Stack))
		if *wrote {
			// Part of an answer is out (or buffered): completing it would
			// hand the client a truncated body as a success. Abort it, as
			// net/http does a panicking handler's: the connection closes
			// (HTTP/1.1) or the stream resets (HTTP/2). The slot is back.
			panic(http.ErrAbortHandler)
		}
		http.Error(w, http.StatusText(http.StatusInternalServerError), http.StatusInternalServerError)
		return
	}
	if *wrote {
		return // the handler answered (a Goexit after writing, say)
	}
	m.refused(w, r, c, err)
}

// refused answers a request the executor did not run.
func (m *handler) refused(w http.ResponseWriter, r *http.Request, c cpuwork.Class, err error) {
	switch {
	case errors.Is(err, cpuwork.ErrSaturated):
		if m.retry != "" {
			w.Header().Set("Retry-After", m.retry)
		}
		http.Error(w, http.StatusText(m.o.ShedStatus), m.o.ShedStatus)
	case errors.Is(err, cpuwork.ErrClosed):
		w.Header().Set("Connection", "close")
		http.Error(w, http.StatusText(http.StatusServiceUnavailable), http.StatusServiceUnavailable)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		http.Error(w, http.StatusText(http.StatusServiceUnavailable), http.StatusServiceUnavailable)
	default:
		m.log.Error("cpuworkhttp: request not run", "method", r.Method, "path", r.URL.Path, "class", c.String(), "err", err)
		http.Error(w, http.StatusText(http.StatusInternalServerError), http.StatusInternalServerError)
	}
}

// parseTimeout reads a client timeout header: a Go duration or a whole
// number of unit (0: a second), positive.
func parseTimeout(v string, unit time.Duration) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	if unit <= 0 {
		unit = time.Second
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		if s <= 0 || s > math.MaxInt64/int64(unit) {
			return 0, false
		}
		return time.Duration(s) * unit, true
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, false
	}
	return d, true
}

// wrap returns w with every optional interface it has (http.Flusher,
// http.Hijacker, io.ReaderFrom, io.StringWriter, http.Pusher, and Unwrap
// for http.ResponseController) and a flag set once the handler has
// answered: written a header or a byte, flushed, or hijacked the
// connection, so that a panic after that is not answered twice.
func wrap(w http.ResponseWriter) (http.ResponseWriter, *bool) {
	wrote := new(bool)
	rw := httpsnoop.Wrap(w, httpsnoop.Hooks{
		WriteHeader: func(next httpsnoop.WriteHeaderFunc) httpsnoop.WriteHeaderFunc {
			return func(code int) {
				if code >= 200 || code == http.StatusSwitchingProtocols {
					*wrote = true
				}
				next(code)
			}
		},
		Write: func(next httpsnoop.WriteFunc) httpsnoop.WriteFunc {
			return func(b []byte) (int, error) { *wrote = true; return next(b) }
		},
		WriteString: func(next httpsnoop.WriteStringFunc) httpsnoop.WriteStringFunc {
			return func(s string) (int, error) { *wrote = true; return next(s) }
		},
		ReadFrom: func(next httpsnoop.ReadFromFunc) httpsnoop.ReadFromFunc {
			return func(r io.Reader) (int64, error) { *wrote = true; return next(r) }
		},
		Flush: func(next httpsnoop.FlushFunc) httpsnoop.FlushFunc {
			return func() { *wrote = true; next() }
		},
		FlushError: func(next httpsnoop.FlushErrorFunc) httpsnoop.FlushErrorFunc {
			return func() error { *wrote = true; return next() }
		},
		Hijack: func(next httpsnoop.HijackFunc) httpsnoop.HijackFunc {
			return func() (net.Conn, *bufio.ReadWriter, error) {
				c, rw, err := next()
				if err == nil {
					*wrote = true
				}
				return c, rw, err
			}
		},
	})
	return rw, wrote
}

// Serve serves srv on ln through cpuwork.WatchListener, so a request that
// arrives while every P runs tasks calling Checkpoint is read within
// 200 µs (cpuwork's network poll interval) instead of up to 10 ms. It returns what
// srv.Serve returns (http.ErrServerClosed after Shutdown).
func Serve(srv *http.Server, ln net.Listener) error {
	return srv.Serve(cpuwork.WatchListener(ln))
}

// ListenAndServe listens on srv.Addr (":http" when empty) and serves as
// Serve does.
func ListenAndServe(srv *http.Server) error {
	addr := srv.Addr
	if addr == "" {
		addr = ":http"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return Serve(srv, ln)
}
