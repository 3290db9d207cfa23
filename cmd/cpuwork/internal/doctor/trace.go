package doctor

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"golang.org/x/exp/trace"
)

// TraceView is what an execution trace of the target says about Go
// scheduling: every time a goroutine waited runnable before it ran.
type TraceView struct {
	Duration time.Duration `json:"duration_ns"` // from the first event to the last
	Procs    int           `json:"procs"`       // Ps seen running in the trace (GOMAXPROCS, as used)
	// Waits counts runnable→running transitions; WaitP50/P99/Max and
	// WaitSum are their waits.
	Waits   int           `json:"waits"`
	WaitP50 time.Duration `json:"wait_p50_ns"`
	WaitP99 time.Duration `json:"wait_p99_ns"`
	WaitMax time.Duration `json:"wait_max_ns"`
	WaitSum time.Duration `json:"wait_sum_ns"`
	// Runnable is the time goroutines spent runnable in the trace: WaitSum
	// plus the waits still running when it ended.
	Runnable time.Duration `json:"runnable_ns"`
	// MeanRunnable is the average number of goroutines waiting in Go's run
	// queues: the time goroutines spent runnable (completed waits, plus the
	// waits still running when the trace ended) / Duration. A lower bound:
	// a goroutine enters the trace only when it first changes state in it.
	MeanRunnable float64 `json:"mean_runnable"`
}

// fetchTrace reads d of execution trace from the target's net/http/pprof
// (/debug/pprof/trace?seconds=N) and summarises it.
func fetchTrace(ctx context.Context, base string, d time.Duration) (*TraceView, error) {
	u, body, err := pprofGet(ctx, base, "trace", d)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	v, err := readTrace(body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", u, err)
	}
	return v, nil
}

// readTrace parses an execution trace (golang.org/x/exp/trace), at most
// maxTraceBody bytes of it, and measures every goroutine's wait from
// runnable to running.
func readTrace(r io.Reader) (*TraceView, error) {
	tr, err := trace.NewReader(capped(r, maxTraceBody, "the trace"))
	if err != nil {
		return nil, err
	}
	runnableSince := map[trace.GoID]trace.Time{}
	procs := map[trace.ProcID]bool{}
	var waits []time.Duration
	var first, last trace.Time
	seen := false
	for {
		ev, err := tr.ReadEvent()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if !seen {
			first, seen = ev.Time(), true
		}
		last = ev.Time()
		if ev.Kind() != trace.EventStateTransition {
			continue
		}
		st := ev.StateTransition()
		switch st.Resource.Kind {
		case trace.ResourceProc:
			if _, to := st.Proc(); to == trace.ProcRunning {
				procs[st.Resource.Proc()] = true
			}
		case trace.ResourceGoroutine:
			g := st.Resource.Goroutine()
			from, to := st.Goroutine()
			switch {
			case to == trace.GoRunnable:
				runnableSince[g] = ev.Time()
			case from == trace.GoRunnable && to == trace.GoRunning:
				if t0, ok := runnableSince[g]; ok {
					waits = append(waits, ev.Time().Sub(t0))
					delete(runnableSince, g)
				}
			default:
				delete(runnableSince, g)
			}
		}
	}
	if !seen {
		return nil, fmt.Errorf("empty trace")
	}
	v := &TraceView{Duration: last.Sub(first), Procs: len(procs), Waits: len(waits)}
	if len(waits) > 0 {
		slices.Sort(waits)
		at := func(q float64) time.Duration { return waits[min(int(q*float64(len(waits))), len(waits)-1)] }
		v.WaitP50, v.WaitP99, v.WaitMax = at(0.5), at(0.99), waits[len(waits)-1]
		for _, w := range waits {
			v.WaitSum += w
		}
	}
	// Goroutines still runnable when the trace ends waited too: their
	// waits so far count in the run-queue time (not in the percentiles,
	// which are of completed waits).
	v.Runnable = v.WaitSum
	for _, t0 := range runnableSince {
		v.Runnable += last.Sub(t0)
	}
	if v.Duration > 0 {
		v.MeanRunnable = v.Runnable.Seconds() / v.Duration.Seconds()
	}
	return v, nil
}

// pprofGet starts reading d of the target's /debug/pprof/<what> (trace or
// profile) and returns the URL and the body.
// The request ends with ctx (the doctor's window plus its margin).
func pprofGet(ctx context.Context, base, what string, d time.Duration) (string, io.ReadCloser, error) {
	secs := max(int(d.Round(time.Second)/time.Second), 1)
	u := fmt.Sprintf("%s/debug/pprof/%s?seconds=%d", strings.TrimSuffix(base, "/"), what, secs)
	body, err := Get(ctx, u, `import _ "net/http/pprof" in the target`)
	return u, body, err
}
