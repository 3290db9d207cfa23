package cpuworkgrpc_test

import (
	"context"
	"net"
	"testing"
	"time"

	v3orcapb "github.com/cncf/xds/go/xds/data/orca/v3"
	v3orcaservice "github.com/cncf/xds/go/xds/service/orca/v3"
	"github.com/cpuwork/cpuwork"
	"github.com/cpuwork/cpuwork/cpuworkgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/orca"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

func serveWith(t *testing.T, e *cpuwork.Executor, o cpuworkgrpc.Options, opts ...grpc.ServerOption) (*gated, healthpb.HealthClient) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(append(opts,
		grpc.ChainUnaryInterceptor(cpuworkgrpc.UnaryServerInterceptor(e, o)),
		grpc.ChainStreamInterceptor(cpuworkgrpc.StreamServerInterceptor(e, o)))...)
	h := &gated{started: make(chan struct{}, 16), release: make(chan struct{})}
	healthpb.RegisterHealthServer(srv, h)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return h, healthpb.NewHealthClient(conn)
}

// orcaReport decodes the per-call ORCA load report in md (nil: none; it
// fails the test when there is more than one).
func orcaReport(t *testing.T, md metadata.MD) *v3orcapb.OrcaLoadReport {
	t.Helper()
	vs := md.Get("endpoint-load-metrics-bin")
	if len(vs) == 0 {
		return nil
	}
	if len(vs) > 1 {
		t.Fatalf("%d load reports in one trailer", len(vs))
	}
	var r v3orcapb.OrcaLoadReport
	if err := proto.Unmarshal([]byte(vs[0]), &r); err != nil {
		t.Fatal(err)
	}
	return &r
}

// With ReportLoad every call's trailer carries one ORCA load report —
// served, refused and streaming calls, and through orca's own recorder
// when the server has orca.CallMetricsServerOption — whose rate counts
// the calls served; without it, none.
func TestReportLoadSendsAnORCAReportWithEveryCall(t *testing.T) {
	for _, c := range []struct {
		name string
		opts []grpc.ServerOption
	}{{"trailer", nil}, {"orca option", []grpc.ServerOption{orca.CallMetricsServerOption(nil)}}} {
		t.Run(c.name, func(t *testing.T) {
			e := newExecutor(t, cpuwork.Options{Slots: 1, Classes: one})
			h, client := serveWith(t, e, cpuworkgrpc.Options{Objective: time.Second, ReportLoad: true}, c.opts...)
			var rep *v3orcapb.OrcaLoadReport
			deadline := time.Now().Add(5 * time.Second)
			for time.Now().Before(deadline) {
				var md metadata.MD
				if err := check(client, context.Background(), "", grpc.Trailer(&md)); err != nil {
					t.Fatal(err)
				}
				if rep = orcaReport(t, md); rep == nil {
					t.Fatal("a served call has no load report")
				}
				if rep.RpsFractional > 0 {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			if rep.RpsFractional <= 0 || rep.ApplicationUtilization < 0 {
				t.Errorf("after seconds of calls: %v", rep)
			}
			// One call holds the slot, one queues (the queue holds one):
			// the next is refused.
			held := make(chan error, 2)
			go func() { held <- check(client, context.Background(), "hold") }()
			<-h.started
			go func() { held <- check(client, context.Background(), "") }()
			waitFor(t, func() bool { return e.Stats().Classes[cpuwork.Interactive].Queued == 1 })
			var md metadata.MD
			if err := check(client, context.Background(), "", grpc.Trailer(&md)); status.Code(err) != codes.ResourceExhausted {
				t.Errorf("a call beyond the queue: %v, want ResourceExhausted", err)
			}
			if orcaReport(t, md) == nil {
				t.Error("a refused call has no load report")
			}
			close(h.release)
			for range 2 {
				if err := <-held; err != nil {
					t.Error(err)
				}
			}
			stream, err := client.Watch(context.Background(), &healthpb.HealthCheckRequest{})
			if err != nil {
				t.Fatal(err)
			}
			for {
				if _, err := stream.Recv(); err != nil {
					break
				}
			}
			if orcaReport(t, stream.Trailer()) == nil {
				t.Error("a stream has no load report")
			}
		})
	}
	e := newExecutor(t, cpuwork.Options{Slots: 1})
	_, client := serveWith(t, e, cpuworkgrpc.Options{})
	var md metadata.MD
	if err := check(client, context.Background(), "", grpc.Trailer(&md)); err != nil {
		t.Fatal(err)
	}
	if orcaReport(t, md) != nil {
		t.Error("ReportLoad off: a load report was sent")
	}
}

// RegisterLoadService serves the executor's load on ORCA's out-of-band
// stream.
func TestRegisterLoadServiceStreamsTheLoad(t *testing.T) {
	e := newExecutor(t, cpuwork.Options{Slots: 1})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	if err := cpuworkgrpc.RegisterLoadService(srv, e, cpuworkgrpc.Options{Objective: time.Second}); err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Stop()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := v3orcaservice.NewOpenRcaServiceClient(conn).StreamCoreMetrics(ctx, &v3orcaservice.OrcaLoadReportRequest{})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if rep.ApplicationUtilization < 0 || rep.RpsFractional < 0 || rep.MemUtilization != 0 {
		t.Errorf("out-of-band report %v", rep)
	}
}
