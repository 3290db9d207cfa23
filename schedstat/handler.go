package schedstat

import (
	"encoding/json"
	"net/http"
)

// Report is what Handler serves: the sampler's last sample and, if given,
// the executor's view (cpuwork.Executor.Stats: its statistics and its
// slowest accounted tasks, which `cpuwork doctor --url` reads).
type Report struct {
	Sample   Sample `json:"sample"`
	Executor any    `json:"executor,omitempty"`
}

// Handler serves s's last sample and executor() (if not nil) as JSON, for
// `cpuwork doctor --url`. Mount it at /debug/cpuwork:
//
//	mux.Handle("/debug/cpuwork", schedstat.Handler(s, func() any { return exec.Stats() }))
func Handler(s *Sampler, executor func() any) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rep := Report{Sample: s.Last()}
		if executor != nil {
			rep.Executor = executor()
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(rep)
	})
}
