package cpuworkhttp

import (
	"net/http"

	"github.com/cpuwork/cpuwork"
)

// TracePath is where TraceHandler is mounted for `cpuwork simulate
// --from`, beside the /debug/cpuwork that `cpuwork doctor --url` reads.
const TracePath = "/debug/cpuwork/trace"

// TraceHandler serves e's recorded requests (cpuwork.Options.Record) as
// the CSV trace `cpuwork simulate --trace` replays
// (cpuwork.Executor.WriteTrace), with Content-Type text/csv. An executor
// that records nothing answers 404 with what to set. Mount it at
// TracePath, outside the admission middleware and, like net/http/pprof,
// only where those allowed to see the service's traffic can reach it:
// the trace holds each request's arrival, class, CPU time, target and a
// digest of its key.
//
//	mux.Handle(cpuworkhttp.TracePath, cpuworkhttp.TraceHandler(exec))
func TraceHandler(e *cpuwork.Executor) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if e.Stats().Record.Capacity == 0 {
			http.Error(w, "cpuwork: this executor records no requests: set cpuwork.Options.Record (Observe: true to record without enforcing)", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "text/csv; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		e.WriteTrace(w) // a write error is the client's hang-up: nothing to answer
	})
}
