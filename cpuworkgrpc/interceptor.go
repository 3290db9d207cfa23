// Package cpuworkgrpc admits gRPC calls through a cpuwork executor: unary
// and stream server interceptors that run each call's handler under a
// slot of its class and refuse, with codes.ResourceExhausted and retry
// information, the calls the executor cannot serve in time.
//
// A module of its own, so that the cpuwork library never depends on
// google.golang.org/grpc. Adopting it is two server options:
//
//	e, err := cpuwork.New(cpuwork.Options{})
//	if err != nil { ... }
//	o := cpuworkgrpc.Options{Objective: time.Second}
//	srv := grpc.NewServer(
//		grpc.UnaryInterceptor(cpuworkgrpc.UnaryServerInterceptor(e, o)),
//		grpc.StreamInterceptor(cpuworkgrpc.StreamServerInterceptor(e, o)))
//
// The handler's context is the task's: cpuwork.Checkpoint(ctx) inside it
// yields to more urgent work and returns the task's error when it should
// stop. The client's deadline (grpc-timeout) is the context's deadline: a
// call the executor expects to finish after it is refused at once.
package cpuworkgrpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/cpuwork/cpuwork"
	"github.com/cpuwork/cpuwork/loadreport"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// PushbackKey is the trailer a refused call carries with the delay, in
// milliseconds, after which the client may retry: gRPC's server pushback
// (gRFC A6, "grpc-retry-pushback-ms"), which grpc-go's retry policy
// honours.
const PushbackKey = "grpc-retry-pushback-ms"

// Options configures the interceptors. The zero value runs every call as
// Interactive with no latency objective beyond the client's deadline and
// tells a refused client to retry after 1 s.
type Options struct {
	// Class returns a call's class from its context (incoming metadata)
	// and full method name ("/pkg.Service/Method"); nil:
	// cpuwork.Interactive for every call. An invalid class fails the
	// call with codes.Internal (a programming error in the function,
	// logged).
	Class func(ctx context.Context, fullMethod string) cpuwork.Class

	// Key returns a call's key (a tenant, an API key, a client, read from
	// its metadata: cpuwork.WithKey): inside its class the slots are
	// shared fairly across keys by slot time, and a key past its share
	// queues behind the others and is refused first. nil, or "": no key.
	Key func(ctx context.Context, fullMethod string) string

	// Objective is the latency objective of every call, counted from its
	// arrival at the interceptor (cpuwork.WithTarget): the executor
	// orders its queue by it and refuses a call it expects to miss it,
	// beyond its class's late budget. 0: none.
	Objective time.Duration

	// Service returns a call's expected run time once it holds a slot
	// (cpuwork.Target.Service); nil or 0: the class's recent average.
	Service func(ctx context.Context, fullMethod string) time.Duration

	// RetryDelay is the delay a refused call is told to wait before a
	// retry: a google.rpc.RetryInfo detail on its status and the
	// PushbackKey trailer. 0: 1 s; negative: neither is sent.
	RetryDelay time.Duration

	// Logger receives a handler's panic (with its stack) and a Class
	// function's invalid class; nil: slog.Default().
	Logger *slog.Logger

	// ReportLoad sends the executor's load with every call, refused ones
	// too, as a per-call ORCA load report (gRFC A51: the
	// endpoint-load-metrics-bin trailer, or through orca's recorder when
	// the server has orca.CallMetricsServerOption):
	// application_utilization, cpu_utilization, rps_fractional and eps as
	// package loadreport defines them, the queue counted against
	// Objective. A client whose balancer is weighted_round_robin then
	// sends a full replica less. false: no report.
	ReportLoad bool
}

// UnaryServerInterceptor returns an interceptor that runs each unary call's
// handler as a task of its class on e (Executor.Do).
//
// A call the executor refuses (its queue full, its queue standing above
// ClassOptions.MaxQueueWait, or the call's objective or deadline out of reach:
// errors wrapping cpuwork.ErrSaturated) fails with
// codes.ResourceExhausted, a google.rpc.RetryInfo detail and the
// PushbackKey trailer; after Executor.Close began, with codes.Unavailable;
// a call whose context ended while it queued, with the context's code
// (Canceled, DeadlineExceeded). A panic in the handler is recovered by
// the executor with its slot released, logged, and fails the call with
// codes.Internal. The handler's own result passes through unchanged.
//
// It panics if e is nil (a programming error).
func UnaryServerInterceptor(e *cpuwork.Executor, o Options) grpc.UnaryServerInterceptor {
	a := newAdmitter(e, o)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, c := a.prepare(ctx, info.FullMethod)
		defer a.reportLoad(ctx, nil)
		var resp any
		var herr error
		err := e.Do(ctx, c, func(ctx context.Context) error {
			resp, herr = handler(ctx, req)
			return nil // the handler's own error passes through herr
		})
		if err == nil {
			return resp, herr
		}
		return nil, a.refusal(ctx, info.FullMethod, c, err)
	}
}

// StreamServerInterceptor returns an interceptor that runs each streaming
// call's handler, for the stream's whole life, as a task of its class on
// e, with the errors of UnaryServerInterceptor. The executor's door is
// asked (Executor.Allow) before the handler receives anything. A stream
// holds its slot until its handler returns: use it for streams that work
// the CPU throughout (a server stream of computed results); a long-lived
// stream that mostly waits should instead run each message's work
// through Executor.Do.
//
// It panics if e is nil (a programming error).
func StreamServerInterceptor(e *cpuwork.Executor, o Options) grpc.StreamServerInterceptor {
	a := newAdmitter(e, o)
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx, c := a.prepare(ss.Context(), info.FullMethod)
		defer a.reportLoad(ctx, ss)
		if err := e.Allow(ctx, c); err != nil {
			return a.refusal(ctx, info.FullMethod, c, err)
		}
		var herr error
		err := e.Do(ctx, c, func(ctx context.Context) error {
			herr = handler(srv, &serverStream{ServerStream: ss, ctx: ctx})
			return nil // the handler's own error passes through herr
		})
		if err == nil {
			return herr
		}
		return a.refusal(ctx, info.FullMethod, c, err)
	}
}

// serverStream is ss with the task's context.
type serverStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *serverStream) Context() context.Context { return s.ctx }

type admitter struct {
	e     *cpuwork.Executor
	o     Options
	retry *durationpb.Duration // nil: no retry information
	log   *slog.Logger
	load  *loadreport.Reporter // nil: Options.ReportLoad is off
	// trailer is the last report's trailer (reportLoad).
	trailer atomic.Pointer[trailerMD]
}

func newAdmitter(e *cpuwork.Executor, o Options) *admitter {
	if e == nil {
		panic("cpuworkgrpc: interceptor with a nil executor")
	}
	if o.RetryDelay == 0 {
		o.RetryDelay = time.Second
	}
	a := &admitter{e: e, o: o, log: o.Logger}
	if o.RetryDelay > 0 {
		a.retry = durationpb.New(o.RetryDelay)
	}
	if a.log == nil {
		a.log = slog.Default()
	}
	if o.ReportLoad {
		a.load = loadreport.New(e, o.Objective)
	}
	return a
}

// prepare attaches the call's target to ctx and returns its class.
func (a *admitter) prepare(ctx context.Context, method string) (context.Context, cpuwork.Class) {
	var t cpuwork.Target
	t.Latency = a.o.Objective
	if a.o.Service != nil {
		t.Service = a.o.Service(ctx, method)
	}
	if t.Latency > 0 || t.Service > 0 {
		ctx = cpuwork.WithTarget(ctx, t)
	}
	if a.o.Key != nil {
		if k := a.o.Key(ctx, method); k != "" {
			ctx = cpuwork.WithKey(ctx, k)
		}
	}
	c := cpuwork.Interactive
	if a.o.Class != nil {
		c = a.o.Class(ctx, method)
	}
	return ctx, c
}

// refusal is the status of a call the executor did not run to its end
// (err is Do's or Allow's error, never nil).
func (a *admitter) refusal(ctx context.Context, method string, c cpuwork.Class, err error) error {
	var pe *cpuwork.PanicError
	switch {
	case errors.As(err, &pe):
		a.log.Error("cpuworkgrpc: handler panicked", "method", method, "panic", fmt.Sprint(pe.Value), "stack", string(pe.Stack))
		return status.Error(codes.Internal, "handler panicked")
	case errors.Is(err, cpuwork.ErrSaturated):
		st := status.New(codes.ResourceExhausted, err.Error())
		if a.retry != nil {
			if d, derr := st.WithDetails(&errdetails.RetryInfo{RetryDelay: a.retry}); derr == nil {
				st = d
			}
			grpc.SetTrailer(ctx, metadata.Pairs(PushbackKey, strconv.FormatInt(a.o.RetryDelay.Milliseconds(), 10)))
		}
		return st.Err()
	case errors.Is(err, cpuwork.ErrClosed):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	}
	a.log.Error("cpuworkgrpc: call not run", "method", method, "class", c.String(), "err", err)
	return status.Error(codes.Internal, err.Error())
}
