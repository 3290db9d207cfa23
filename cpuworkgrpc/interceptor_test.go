package cpuworkgrpc_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cpuwork/cpuwork"
	"github.com/cpuwork/cpuwork/cpuworkgrpc"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// gated is a Health service whose calls do what their service name says:
// "hold" waits for release, "panic" panics, anything else answers at once
// after a Checkpoint on the task's context.
type gated struct {
	healthpb.UnimplementedHealthServer
	started chan struct{}
	release chan struct{}
	running atomic.Int32
	most    atomic.Int32
}

func (h *gated) enter() {
	n := h.running.Add(1)
	for {
		m := h.most.Load()
		if n <= m || h.most.CompareAndSwap(m, n) {
			break
		}
	}
}

func (h *gated) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	h.enter()
	defer h.running.Add(-1)
	switch req.Service {
	case "hold":
		h.started <- struct{}{}
		<-h.release
	case "panic":
		panic("boom")
	case "fail":
		return nil, status.Error(codes.NotFound, "the handler's own error")
	}
	if err := cpuwork.Checkpoint(ctx); err != nil {
		return nil, err
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

func (h *gated) Watch(req *healthpb.HealthCheckRequest, ss healthpb.Health_WatchServer) error {
	h.enter()
	defer h.running.Add(-1)
	if req.Service == "hold" {
		h.started <- struct{}{}
		<-h.release
	}
	for range 3 {
		if err := cpuwork.Checkpoint(ss.Context()); err != nil {
			return err
		}
		if err := ss.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}); err != nil {
			return err
		}
		if req.Service == "panic" {
			panic("mid-stream")
		}
	}
	return nil
}

// serve starts a gRPC server with the interceptors over loopback.
func serve(t *testing.T, e *cpuwork.Executor, o cpuworkgrpc.Options) (*gated, healthpb.HealthClient) {
	t.Helper()
	return serveWith(t, e, o)
}

func newExecutor(t *testing.T, o cpuwork.Options) *cpuwork.Executor {
	t.Helper()
	e, err := cpuwork.New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(context.Background()) })
	return e
}

func check(c healthpb.HealthClient, ctx context.Context, service string, opts ...grpc.CallOption) error {
	_, err := c.Check(ctx, &healthpb.HealthCheckRequest{Service: service}, opts...)
	return err
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

var one = [4]cpuwork.ClassOptions{{QueueLimit: 1}, {QueueLimit: 1}, {QueueLimit: 1}, {QueueLimit: 1}}

func TestUnaryCallsRunOnlyWhileHoldingASlot(t *testing.T) {
	e := newExecutor(t, cpuwork.Options{Slots: 1})
	h, c := serve(t, e, cpuworkgrpc.Options{})
	wg := holdCalls(t, c, 3)
	for range 3 {
		<-h.started
		time.Sleep(20 * time.Millisecond)
		h.release <- struct{}{}
	}
	wg.Wait()
	if m := h.most.Load(); m != 1 {
		t.Errorf("%d calls ran at once on 1 slot", m)
	}
	if err := check(c, context.Background(), "fail"); status.Code(err) != codes.NotFound {
		t.Errorf("the handler's own error: %v, want it unchanged (NotFound)", err)
	}
}

func TestRefusedCallIsResourceExhaustedWithRetryInformation(t *testing.T) {
	e := newExecutor(t, cpuwork.Options{Slots: 1, Classes: one})
	h, c := serve(t, e, cpuworkgrpc.Options{RetryDelay: 250 * time.Millisecond})
	var wg sync.WaitGroup
	wg.Go(func() { check(c, context.Background(), "hold") })
	<-h.started
	wg.Go(func() { check(c, context.Background(), "hold") })
	waitFor(t, func() bool { return e.Stats().Classes[cpuwork.Interactive].Queued == 1 })

	var trailer metadata.MD
	err := check(c, context.Background(), "x", grpc.Trailer(&trailer))
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("refused call: %v, want ResourceExhausted", err)
	}
	var delay time.Duration
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			delay = ri.RetryDelay.AsDuration()
		}
	}
	if delay != 250*time.Millisecond {
		t.Errorf("RetryInfo delay %v, want 250ms (details %v)", delay, st.Details())
	}
	if v := trailer.Get(cpuworkgrpc.PushbackKey); len(v) != 1 || v[0] != "250" {
		t.Errorf("pushback trailer %v, want [250]", v)
	}
	// A stream is refused the same way, before its handler runs.
	ws, err := c.Watch(context.Background(), &healthpb.HealthCheckRequest{})
	if err == nil {
		_, err = ws.Recv()
	}
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("refused stream: %v, want ResourceExhausted", err)
	}
	h.release <- struct{}{}
	<-h.started
	h.release <- struct{}{}
	wg.Wait()
}

func TestClientDeadlineThatCannotBeMetIsRefusedAtOnce(t *testing.T) {
	e := newExecutor(t, cpuwork.Options{Slots: 1})
	h, c := serve(t, e, cpuworkgrpc.Options{
		Service: func(context.Context, string) time.Duration { return 200 * time.Millisecond },
	})
	var wg sync.WaitGroup
	wg.Go(func() { check(c, context.Background(), "hold") })
	<-h.started
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := check(c, ctx, "x"); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a 200 ms call with 50 ms left behind a busy slot: %v, want ResourceExhausted", err)
	}
	if st := e.Stats().Classes[cpuwork.Interactive]; st.Shed == 0 {
		t.Errorf("not counted as shed: %+v", st)
	}
	h.release <- struct{}{}
	wg.Wait()
}

func TestPanicIsInternalAndTheSlotIsKept(t *testing.T) {
	e := newExecutor(t, cpuwork.Options{Slots: 1})
	_, c := serve(t, e, cpuworkgrpc.Options{Logger: discard()})
	for range 3 {
		if err := check(c, context.Background(), "panic"); status.Code(err) != codes.Internal {
			t.Fatalf("panicking handler: %v, want Internal", err)
		}
	}
	if err := check(c, context.Background(), "x"); err != nil {
		t.Errorf("after the panics: %v", err)
	}
}

func TestStreamRunsUnderItsClassWithTheTasksContext(t *testing.T) {
	e := newExecutor(t, cpuwork.Options{Slots: 1})
	var methods sync.Map
	_, c := serve(t, e, cpuworkgrpc.Options{Class: func(ctx context.Context, m string) cpuwork.Class {
		methods.Store(m, true)
		if m == "/grpc.health.v1.Health/Watch" {
			return cpuwork.Batch
		}
		return cpuwork.Interactive
	}})
	ws, err := c.Watch(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		if _, err := ws.Recv(); err != nil {
			if err != io.EOF {
				t.Errorf("stream: %v", err)
			}
			break
		}
		n++
	}
	if n != 3 {
		t.Errorf("%d messages, want 3", n)
	}
	if st := e.Stats().Classes[cpuwork.Batch]; st.Completed != 1 {
		t.Errorf("batch completed %d, want 1 (the stream)", st.Completed)
	}
	if _, ok := methods.Load("/grpc.health.v1.Health/Watch"); !ok {
		t.Error("Class did not see the stream's method")
	}
}

func TestClosedExecutorIsUnavailable(t *testing.T) {
	e := newExecutor(t, cpuwork.Options{Slots: 1})
	_, c := serve(t, e, cpuworkgrpc.Options{})
	e.Close(context.Background())
	if err := check(c, context.Background(), "x"); status.Code(err) != codes.Unavailable {
		t.Errorf("closed executor: %v, want Unavailable", err)
	}
}

func TestNilExecutorPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("nil executor: no panic")
		}
	}()
	cpuworkgrpc.UnaryServerInterceptor(nil, cpuworkgrpc.Options{})
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// Options.Key charges a call that queues to its key (Stats.Keys).
func TestKeyPerCall(t *testing.T) {
	e := newExecutor(t, cpuwork.Options{Slots: 1})
	h, c := serve(t, e, cpuworkgrpc.Options{Key: func(ctx context.Context, _ string) string {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get("tenant"); len(v) > 0 {
			return v[0]
		}
		return ""
	}})
	var wg sync.WaitGroup
	wg.Go(func() { check(c, context.Background(), "hold") })
	<-h.started
	for range 2 {
		wg.Go(func() { check(c, metadata.AppendToOutgoingContext(context.Background(), "tenant", "tenant-a"), "x") })
	}
	waitFor(t, func() bool { return e.Stats().Classes[cpuwork.Interactive].Queued == 2 })
	h.release <- struct{}{}
	wg.Wait()
	st := e.Stats()
	if len(st.Keys) != 1 || st.Keys[0].Key != "tenant-a" || st.Keys[0].SlotTime <= 0 {
		t.Errorf("Stats.Keys %+v: want tenant-a with its two calls' slot time", st.Keys)
	}
}

// A streaming handler that panics after sending part of its answer ends
// its stream with Internal, never OK: the client's Recv after the
// messages sent returns the error, and the slot is back.
func TestAPanicMidStreamEndsItWithAnError(t *testing.T) {
	e := newExecutor(t, cpuwork.Options{Slots: 1})
	_, c := serve(t, e, cpuworkgrpc.Options{Logger: slog.New(slog.DiscardHandler)})
	for range 2 { // more panics than slots: a lost slot would hang the next call
		st, err := c.Watch(context.Background(), &healthpb.HealthCheckRequest{Service: "panic"})
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for {
			_, err = st.Recv()
			if err != nil {
				break
			}
			got++
		}
		if got != 1 || status.Code(err) != codes.Internal {
			t.Fatalf("a stream that panicked after one message: %d received, then %v; want 1, then Internal", got, err)
		}
	}
}

// Under Observe the interceptors run every call at once, past the slots
// and the queue, unary and streaming, and the executor records each one.
func TestObservedCallsRunAtOnceAndAreRecorded(t *testing.T) {
	e := newExecutor(t, cpuwork.Options{Slots: 1, Classes: one, Record: cpuwork.RecordOptions{Observe: true}})
	h, c := serve(t, e, cpuworkgrpc.Options{Objective: time.Second})
	wg := holdCalls(t, c, 3)
	for range 3 {
		<-h.started // all three enter before any is released
	}
	for range 3 {
		h.release <- struct{}{}
	}
	wg.Wait()
	stream, err := c.Watch(context.Background(), &healthpb.HealthCheckRequest{Service: "ok"})
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := stream.Recv(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if m := h.most.Load(); m != 3 {
		t.Errorf("%d calls at once under Observe on 1 slot, want 3", m)
	}
	if st := e.Stats().Record; st.Recorded != 4 {
		t.Errorf("recorded %d calls, want 4 (three unary, one stream)", st.Recorded)
	}
}

// holdCalls starts n "hold" calls, each failing t if it errs; the
// WaitGroup is done when all have returned.
func holdCalls(t *testing.T, c healthpb.HealthClient, n int) *sync.WaitGroup {
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if err := check(c, context.Background(), "hold"); err != nil {
				t.Error(err)
			}
		})
	}
	return &wg
}
