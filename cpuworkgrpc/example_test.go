package cpuworkgrpc_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/cpuwork/cpuwork"
	"github.com/cpuwork/cpuwork/cpuworkgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// A gRPC server whose calls run under the executor's slots, in order of a
// 1 s objective; a call the executor cannot serve in time fails at once
// with codes.ResourceExhausted and a RetryInfo detail.
func Example() {
	e, err := cpuwork.New(cpuwork.Options{})
	if err != nil {
		panic(err)
	}
	defer e.Close(context.Background())
	o := cpuworkgrpc.Options{Objective: time.Second}
	srv := grpc.NewServer(
		grpc.UnaryInterceptor(cpuworkgrpc.UnaryServerInterceptor(e, o)),
		grpc.StreamInterceptor(cpuworkgrpc.StreamServerInterceptor(e, o)))
	healthpb.RegisterHealthServer(srv, health.NewServer())

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go srv.Serve(ln)
	defer srv.Stop()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	fmt.Println(resp.GetStatus(), err, e.Stats().Classes[cpuwork.Interactive].Completed)
	// Output: SERVING <nil> 1
}
