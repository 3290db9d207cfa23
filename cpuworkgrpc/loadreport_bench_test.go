package cpuworkgrpc

import (
	"context"
	"testing"

	"github.com/cpuwork/cpuwork"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// trailerStream is the server transport stream a unary call's context
// carries: SetTrailer keeps what it is given.
type trailerStream struct{ md metadata.MD }

func (s *trailerStream) Method() string                  { return "/b.B/M" }
func (s *trailerStream) SetHeader(md metadata.MD) error  { return nil }
func (s *trailerStream) SendHeader(md metadata.MD) error { return nil }
func (s *trailerStream) SetTrailer(md metadata.MD) error { s.md = md; return nil }

// What ReportLoad adds to a unary call through the interceptor: run with
// -bench UnaryInterceptor and compare the two.
func BenchmarkUnaryInterceptor(b *testing.B) {
	for _, report := range []bool{false, true} {
		name := "report=off"
		if report {
			name = "report=on"
		}
		b.Run(name, func(b *testing.B) {
			e, err := cpuwork.New(cpuwork.Options{Slots: 2})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close(context.Background())
			in := UnaryServerInterceptor(e, Options{ReportLoad: report})
			info := &grpc.UnaryServerInfo{FullMethod: "/b.B/M"}
			h := func(ctx context.Context, req any) (any, error) { return req, nil }
			ts := &trailerStream{}
			ctx := grpc.NewContextWithServerTransportStream(context.Background(), ts)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := in(ctx, nil, info, h); err != nil {
					b.Fatal(err)
				}
			}
			if report && ts.md == nil {
				b.Fatal("no trailer set")
			}
		})
	}
}
