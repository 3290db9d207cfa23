package admission

import (
	"context"
	"errors"
	"time"
)

// The errors the Granter returns for what it decides, defined once here;
// the executor's package exports them under the same names (with their
// documentation) as aliases of these values.
var (
	ErrSaturated = errors.New("cpuwork: executor saturated")
	ErrClosed    = errors.New("cpuwork: executor closed")
	ErrDeadline  = errors.New("cpuwork: latency target cannot be met")
)

type targetKey struct{}

type targetVal struct {
	arrival, latency, service int64 // Now() at WithTarget; ns
}

// TargetContext returns a context that carries a request's latency target
// (latency from now; 0 or negative: none) and expected run time
// (service; 0: unknown), which setDue reads.
func TargetContext(ctx context.Context, latency, service time.Duration) context.Context {
	return context.WithValue(ctx, targetKey{}, &targetVal{arrival: Now(), latency: int64(latency), service: int64(max(service, 0))})
}

// TargetOf is the arrival (Now's nanoseconds) and latency (ns; 0 or
// negative: none) of ctx's target, and false when ctx carries none.
func TargetOf(ctx context.Context) (arrival, latency int64, ok bool) {
	v, ok := ctx.Value(targetKey{}).(*targetVal)
	if !ok {
		return 0, 0, false
	}
	return v.arrival, v.latency, true
}

// TargetContextAt is TargetContext for a request that arrived at arrival,
// in the Granter's clock's nanoseconds (Config.Clock): a simulation's
// virtual clock.
func TargetContextAt(ctx context.Context, arrival int64, latency, service time.Duration) context.Context {
	return context.WithValue(ctx, targetKey{}, &targetVal{arrival: arrival, latency: int64(latency), service: int64(max(service, 0))})
}

// TimeAt is the time.Time of t in Now's nanoseconds: a context deadline
// on a virtual clock (Config.Clock) is TimeAt of the virtual instant.
func TimeAt(t int64) time.Time { return epoch.Add(time.Duration(t)) }
