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
// A request's handler runs as the task: cpuwork.Checkpoint(r.Context())
// inside it yields to more urgent work and returns the task's error when
// it should stop. Handlers that mostly wait (on a database, a downstream
// service) hold a slot while they wait; route them around the middleware
// or wrap only their CPU-bound part with Executor.Do.
package cpuworkhttp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/cpuwork/cpuwork"
)

// Options configures Handler. The zero value runs every request as
// Interactive with no latency objective beyond its context's deadline and
// answers a shed request 503 with "Retry-After: 1".
type Options struct {
	// Class returns a request's class; nil: cpuwork.Interactive for
	// every request. An invalid class is answered 500 (a programming
	// error in the function, logged).
	Class func(*http.Request) cpuwork.Class

	// Objective is the latency objective of every request, counted from
	// its arrival at the middleware: the executor orders its queue by it,
	// refuses a request it expects to miss it (cpuwork.WithTarget; the
	// class's late budget lets a few through, order.go) and, unless the
	// executor's ClassOptions.MaxQueueWait sets the class's own, sheds while
	// its queue stands above a tenth of it. 0: none.
	Objective time.Duration

	// Service returns a request's expected run time once it holds a slot
	// (cpuwork.Target.Service): the door's estimate of when a request
	// will end, which for a request far costlier than its class's
	// average (a large image, an expensive query) is otherwise the
	// average. nil or 0: the class's recent average slot time.
	Service func(*http.Request) time.Duration

	// TimeoutHeader names a request header carrying the client's own
	// timeout, relative to the request's arrival, as a Go duration
	// ("250ms", "1.5s") or whole seconds ("2"). The request's context
	// then ends at that deadline, and a request the executor expects to
	// finish after it is refused at once instead of served too late.
	// Malformed or non-positive values are ignored (the request is
	// served without one). "": no header is read.
	TimeoutHeader string

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
// with its slot released, logged, and answered 500 when nothing was
// written yet; http.ErrAbortHandler is re-raised after the slot is
// released, so net/http aborts the response as it would without the
// middleware. A request whose client went away or whose deadline passed
// while it queued is answered 503 (the client, if still there, may
// retry). After Executor.Close began, requests are answered 503 with
// "Connection: close".
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
	return &handler{e: e, h: h, o: o, retry: retry, log: log}
}

type handler struct {
	e     *cpuwork.Executor
	h     http.Handler
	o     Options
	retry string
	log   *slog.Logger
}

func (m *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	if m.o.TimeoutHeader != "" {
		if d, ok := parseTimeout(r.Header.Get(m.o.TimeoutHeader)); ok {
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
	c := cpuwork.Interactive
	if m.o.Class != nil {
		c = m.o.Class(r)
	}
	if err := m.e.Allow(ctx, c); err != nil {
		m.refused(w, r, c, err)
		return
	}
	rw := &responseWriter{ResponseWriter: w}
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
		if !rw.wrote {
			http.Error(w, http.StatusText(http.StatusInternalServerError), http.StatusInternalServerError)
		}
		return
	}
	if rw.wrote {
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

// parseTimeout reads a client timeout header: a Go duration or whole
// seconds, positive.
func parseTimeout(v string) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		if s <= 0 || s > math.MaxInt64/int64(time.Second) {
			return 0, false
		}
		return time.Duration(s) * time.Second, true
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, false
	}
	return d, true
}

// responseWriter records whether the handler wrote anything, so a panic
// after the header went out is not answered twice. Unwrap lets
// http.ResponseController reach the server's writer (deadlines, Hijack).
type responseWriter struct {
	http.ResponseWriter
	wrote bool
}

func (w *responseWriter) WriteHeader(code int) {
	if code >= 200 || code == http.StatusSwitchingProtocols {
		w.wrote = true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *responseWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Flush passes http.Flusher through (a streaming handler's type assertion
// still finds it).
func (w *responseWriter) Flush() {
	w.wrote = true
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap returns the server's ResponseWriter, for http.ResponseController.
func (w *responseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

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
