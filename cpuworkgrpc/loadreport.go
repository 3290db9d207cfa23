package cpuworkgrpc

import (
	"context"

	v3orcapb "github.com/cncf/xds/go/xds/data/orca/v3"
	"github.com/cpuwork/cpuwork"
	"github.com/cpuwork/cpuwork/loadreport"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/orca"
	"google.golang.org/protobuf/proto"
)

// orcaTrailer is the trailer key of a per-call ORCA load report (gRFC
// A51; grpc-go's orca package sends and reads the same).
const orcaTrailer = "endpoint-load-metrics-bin"

// RegisterLoadService registers on s the ORCA service (grpc-go's orca
// package: xds.service.orca.v3.OpenRcaService) that streams e's load to a
// client asking for out-of-band reports (weighted_round_robin with
// enableOobLoadReport), with the queue counted against o.Objective: the
// same report Options.ReportLoad sends with each call, at the interval
// the client asks for and at least orca's minimum (30 s).
func RegisterLoadService(s grpc.ServiceRegistrar, e *cpuwork.Executor, o Options) error {
	return orca.Register(s, orca.ServiceOptions{ServerMetricsProvider: serverMetrics{loadreport.New(e, o.Objective)}})
}

// serverMetrics is a Reporter as orca's ServerMetricsProvider.
type serverMetrics struct{ r *loadreport.Reporter }

func (m serverMetrics) ServerMetrics() *orca.ServerMetrics {
	rep := m.r.Report()
	return &orca.ServerMetrics{CPUUtilization: rep.CPUUtilization, MemUtilization: -1, AppUtilization: rep.Utilization,
		QPS: rep.RPS, EPS: rep.EPS, Utilization: map[string]float64{}, RequestCost: map[string]float64{}, NamedMetrics: map[string]float64{}}
}

// reportLoad sends the executor's load with the call whose context is
// ctx: through orca's per-call recorder when the server has
// orca.CallMetricsServerOption (which then sends it), else as the
// endpoint-load-metrics-bin trailer itself (set, for a stream, on ss).
func (a *admitter) reportLoad(ctx context.Context, ss grpc.ServerStream) {
	if a.load == nil {
		return
	}
	rep := a.load.Report()
	if rec := orca.CallMetricsRecorderFromContext(ctx); rec != nil {
		rec.SetApplicationUtilization(rep.Utilization)
		rec.SetCPUUtilization(rep.CPUUtilization)
		rec.SetQPS(rep.RPS)
		rec.SetEPS(rep.EPS)
		return
	}
	md := a.trailerFor(rep)
	if md == nil {
		return
	}
	if ss != nil {
		ss.SetTrailer(md)
		return
	}
	grpc.SetTrailer(ctx, md)
}

// trailerMD is a report and its trailer, marshalled once per sample:
// grpc copies a trailer it is given (metadata.Join), so calls share it.
type trailerMD struct {
	rep loadreport.Report
	md  metadata.MD
}

// trailerFor is rep as the endpoint-load-metrics-bin trailer, reused
// while the report is the same (it changes every 250 ms); nil if it
// cannot be marshalled.
func (a *admitter) trailerFor(rep loadreport.Report) metadata.MD {
	if t := a.trailer.Load(); t != nil && t.rep == rep {
		return t.md
	}
	b, err := proto.Marshal(&v3orcapb.OrcaLoadReport{ApplicationUtilization: rep.Utilization, CpuUtilization: rep.CPUUtilization,
		RpsFractional: rep.RPS, Eps: rep.EPS})
	if err != nil {
		return nil
	}
	md := metadata.Pairs(orcaTrailer, string(b))
	a.trailer.Store(&trailerMD{rep, md})
	return md
}
