// Package admit wraps a server's handler in the admitters a Go team would
// put in front of it, as the realbench servers' -variant flag names them.
// Every refusal is answered 503.
package admit

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cpuwork/cpuwork"
	"github.com/cpuwork/cpuwork/cpuworkhttp"
	"github.com/failsafe-go/failsafe-go/adaptivelimiter"
	"github.com/failsafe-go/failsafe-go/failsafehttp"
	"github.com/failsafe-go/failsafe-go/priority"
	"github.com/platinummonkey/go-concurrency-limits/core"
	"github.com/platinummonkey/go-concurrency-limits/limit"
	"github.com/platinummonkey/go-concurrency-limits/limiter"
	"github.com/platinummonkey/go-concurrency-limits/strategy"
	"golang.org/x/sync/semaphore"
)

// Serve serves app behind variant's admitter on a loopback port, writes
// "listening ADDR" to out, and serves until stdin reaches EOF (the bench
// closes it, or dies); it then writes "abandoned small=N large=M": the
// requests of each kind (by path, /small and /large) that app finished
// after their client had gone (their context done), the work nobody
// received; the cpuwork variant first writes "pacing paced=0|1
// target=T closed_s=S lowered=N held=M occupancy=O" (Stats.Pacing). The cpuwork
// variant is the lines a user adds to a server to
// adopt cpuwork: an executor on the CPU budget, the middleware with the
// latency objective, the listener watched.
func Serve(variant string, app http.Handler, slo time.Duration, out io.Writer, stdin io.Reader) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	var abandoned [2]atomic.Int64 // small, large
	app = counted(app, &abandoned)
	h, err := Wrap(variant, app, slo, runtime.GOMAXPROCS(0))
	if err != nil {
		return err
	}
	if variant == "failsafe-prio" {
		stop := prioritizer.ScheduleCalibrations(context.Background(), calibrateEvery)
		defer stop()
	}
	var exec *cpuwork.Executor
	if variant == "cpuwork" || variant == "cpuwork-observe" {
		var o cpuwork.Options
		// cpuwork-observe: the same lines with Observe: every request
		// runs at once and is recorded, its trace written at the end to
		// $CPUWORK_TRACE_OUT.
		o.Record.Observe = variant == "cpuwork-observe"
		if *mixed {
			// Batch requests run to their end without a Checkpoint (the
			// server's loops are in libraries): on slots of their own
			// beside the budget's, on demoted threads, with a P each;
			// under a CPU quota in a child cgroup capped to what the
			// requests leave of it.
			o.Batch.Beside = true
			runtime.GOMAXPROCS(2 * runtime.GOMAXPROCS(0))
		}
		e, err := cpuwork.New(o)
		if err != nil {
			return err
		}
		defer e.Close(context.Background())
		exec = e
		h = cpuworkhttp.Handler(e, app, cpuworkhttp.Options{Objective: slo, Key: tenantOf})
		if *mixed {
			// The batch endpoint's requests as Batch, with no objective:
			// throughput is what counts for them.
			batch := cpuworkhttp.Handler(e, app, cpuworkhttp.Options{Key: tenantOf,
				Class: func(*http.Request) cpuwork.Class { return cpuwork.Batch }})
			h = byKind(h, batch)
		}
		ln = cpuwork.WatchListener(ln)
	}
	srv := &http.Server{Handler: tenanted(h), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	fmt.Fprintf(out, "listening %s\n", ln.Addr())
	io.Copy(io.Discard, stdin)
	if exec != nil {
		// The fractional slot's pacer over the run (the bench reads it
		// when it ends the run, before the shutdown below).
		p := exec.Stats().Pacing
		fmt.Fprintf(out, "pacing paced=%d target=%.3f closed_s=%.3f lowered=%d held=%d occupancy=%.3f\n",
			map[bool]int{true: 1}[p.Paced], p.Target, p.Closed.Seconds(), p.Lowered, p.Held, p.Occupancy)
		// The latency split per class: queue wait and slot time.
		for _, c := range exec.Stats().Classes {
			if c.Submitted == 0 {
				continue
			}
			fmt.Fprintf(out, "split class=%s submitted=%d rejected=%d shed=%d wait_p50_ms=%.1f wait_p99_ms=%.1f slot_p50_ms=%.1f slot_p99_ms=%.1f slot_s=%.3f\n",
				c.Class, c.Submitted, c.Rejected, c.Shed, ms(c.QueueWait.P50), ms(c.QueueWait.P99), ms(c.SlotTime.P50), ms(c.SlotTime.P99), c.SlotSeconds)
		}
		// The demoted batch threads' starvation guard over the run.
		if d := exec.Stats().Demotion; d.Enabled {
			fmt.Fprintf(out, "demotion suspensions=%d promotions=%d retired=%d starved_s=%.3f\n",
				d.Suspensions, d.Promotions, d.Retired, d.StarvedTime.Seconds())
		}
	}
	// Let the handlers still running finish (a client that gave up left
	// them running), so that their work is counted.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Shutdown(ctx)
	fmt.Fprintf(out, "abandoned small=%d large=%d\n", abandoned[0].Load(), abandoned[1].Load())
	if path := os.Getenv("CPUWORK_TRACE_OUT"); path != "" && exec != nil && variant == "cpuwork-observe" {
		return writeTrace(exec, path)
	}
	return nil
}

// writeTrace writes e's recorded requests to path.
func writeTrace(e *cpuwork.Executor, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := e.WriteTrace(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// mixed is the -mixed flag of every realbench server: /small is
// interactive traffic with a latency objective, /large batch work whose
// throughput is what counts (the bench's mixed-urgency scenarios). The
// admitters that tell the two apart do so then; the others admit both
// alike.
var mixed = flag.Bool("mixed", false, "serve /small as interactive and /large as batch traffic (the admitters that can tell them apart do)")

// byKind routes /large to batch, everything else to interactive.
func byKind(interactive, batch http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/large" {
			batch.ServeHTTP(w, r)
			return
		}
		interactive.ServeHTTP(w, r)
	})
}

// TenantHeader carries a request's tenant to the admitters (the bench's
// load generator sends it as "?tenant=tK", which tenanted moves here, so
// that the server's own URL handling never sees it).
const TenantHeader = "X-Tenant"

// tenanted moves a request's "tenant" query parameter to TenantHeader.
func tenanted(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if t := r.URL.Query().Get("tenant"); t != "" {
			r.Header.Set(TenantHeader, t)
			r.URL.RawQuery = ""
			r.RequestURI = r.URL.RequestURI()
		}
		h.ServeHTTP(w, r)
	})
}

// tenantOf is a request's tenant ("": none).
func tenantOf(r *http.Request) string { return r.Header.Get(TenantHeader) }

// counted is app, counting in abandoned the requests it finished after
// their client had gone.
func counted(app http.Handler, abandoned *[2]atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		app.ServeHTTP(w, r)
		if r.Context().Err() != nil {
			i := 0
			if r.URL.Path == "/large" {
				i = 1
			}
			abandoned[i].Add(1)
		}
	})
}

// Wrap returns app behind variant's admitter (gmp is GOMAXPROCS, slo the
// latency objective):
//
//	stock      app as is: every request runs at once
//	sem        imgproxy's admitter: an x/sync semaphore of gmp workers and
//	           a queue of 2x that, 503 when the queue is full
//	sem2x      the same with 2x gmp workers (imgproxy's default) and a
//	           queue of 4x gmp
//	shipped    the admitter cgo image servers such as imaginary ship: an
//	           x/sync semaphore of 2x gmp workers, no queue
//	shipped-queue  the same with a queue of 8
//	failsafe   failsafe-go's adaptive limiter with its queue (limit x 2 to
//	           x 3, waiting at most slo), through failsafehttp (its 429
//	           answered 503)
//	gradient2  go-concurrency-limits' Gradient2 limit behind its FIFO
//	           blocking limiter (a backlog of 8x gmp, waiting at most slo)
//	two-sem    with -mixed: a semaphore for each kind, as zoekt ships:
//	           interactive gmp workers and a queue of 2x, batch a quarter
//	           of gmp (at least 1) and a queue of 2x that
//	gradient2-part  with -mixed: go-concurrency-limits' Gradient2 limit
//	           behind its FIFO blocking limiter, partitioned by kind with
//	           its lookup partition strategy (interactive 80 %, batch 20 %)
//	tenant-sem sem, and inside it a semaphore per tenant (TenantHeader) of
//	           half of gmp workers (at least 1) and a queue of 2x that: no
//	           tenant holds more than half of the workers
//	failsafe-prio  failsafe-go's adaptive limiter with its queue, built
//	           prioritized (BuildPrioritized) with a usage tracker: every
//	           request at priority.Medium (with -mixed: interactive
//	           priority.High, batch priority.Low), its tenant the user
//	           whose recent usage lowers its level when the limiter sheds
//	sem-deadline  an x/sync semaphore of gmp workers whose waiters leave
//	           at slo: a request with no worker by its arrival plus slo
//	           is refused
//	cpuwork    app as is: Serve adds the middleware
func Wrap(variant string, app http.Handler, slo time.Duration, gmp int) (http.Handler, error) {
	switch variant {
	case "stock", "cpuwork", "cpuwork-observe":
		return app, nil
	case "sem":
		return semaphored(app, gmp, 2*gmp), nil
	case "sem2x":
		return semaphored(app, 2*gmp, 4*gmp), nil
	case "sem-deadline":
		return untilObjective(app, gmp, slo), nil
	case "shipped":
		return semaphored(app, 2*gmp, 0), nil
	case "shipped-queue":
		return semaphored(app, 2*gmp, 8), nil
	case "failsafe":
		lim := adaptivelimiter.NewBuilder[*http.Response]().WithQueueing(2, 3).WithMaxWaitTime(slo).Build()
		return status503(failsafehttp.NewHandler(app, lim)), nil
	case "gradient2":
		return gradient2(app, slo, 8*gmp, strategy.NewSimpleStrategy(200), nil)
	case "two-sem":
		bw := max(gmp/4, 1)
		return byKind(semaphored(app, gmp, 2*gmp), semaphored(app, bw, 2*bw)), nil
	case "gradient2-part":
		return gradient2Partitioned(app, slo, 8*gmp)
	case "tenant-sem":
		return perTenant(semaphored(app, gmp, 2*gmp), max(gmp/2, 1)), nil
	case "failsafe-prio":
		lim := adaptivelimiter.NewBuilder[*http.Response]().WithQueueing(2, 3).WithMaxWaitTime(slo).BuildPrioritized(prioritizer)
		h := status503(failsafehttp.NewHandler(app, lim))
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p := priority.Medium
			if *mixed {
				p = priority.High
				if r.URL.Path == "/large" {
					p = priority.Low
				}
			}
			ctx := priority.ContextWithPriority(r.Context(), p)
			if t := tenantOf(r); t != "" {
				ctx = priority.ContextWithUser(ctx, t)
			}
			h.ServeHTTP(w, r.WithContext(ctx))
		}), nil
	}
	return nil, fmt.Errorf("unknown variant %q", variant)
}

// semaphored is imgproxy's admitter: workers requests run at once (an
// x/sync semaphore), up to queue more wait for one, the rest are refused.
func semaphored(h http.Handler, workers, queue int) http.Handler {
	sem := semaphore.NewWeighted(int64(workers))
	var inside atomic.Int64
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if inside.Add(1) > int64(workers+queue) {
			inside.Add(-1)
			http.Error(w, "queue full", http.StatusServiceUnavailable)
			return
		}
		defer inside.Add(-1)
		if err := sem.Acquire(r.Context(), 1); err != nil {
			http.Error(w, "gone", http.StatusServiceUnavailable)
			return
		}
		defer sem.Release(1)
		h.ServeHTTP(w, r)
	})
}

// untilObjective admits workers requests at once (an x/sync semaphore);
// the others wait for one until their arrival plus slo, then are refused.
func untilObjective(h http.Handler, workers int, slo time.Duration) http.Handler {
	sem := semaphore.NewWeighted(int64(workers))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), slo)
		err := sem.Acquire(ctx, 1)
		cancel()
		if err != nil {
			http.Error(w, "waited the objective", http.StatusServiceUnavailable)
			return
		}
		defer sem.Release(1)
		h.ServeHTTP(w, r)
	})
}

// prioritizer is failsafe-prio's, with its usage tracker (a 10 s window,
// up to 1,000 users), calibrated every calibrateEvery (Serve schedules
// it), as failsafe-go's documentation configures it.
var prioritizer = adaptivelimiter.NewPrioritizerBuilder().
	WithUsageTracker(priority.NewUsageTracker(10*time.Second, 1000)).Build()

const calibrateEvery = time.Second

// perTenant admits each tenant's requests (TenantHeader; "" is a tenant
// too) through a semaphore of its own of workers, with a queue of twice
// that, before h.
func perTenant(h http.Handler, workers int) http.Handler {
	var mu sync.Mutex
	sems := map[string]http.Handler{}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t := tenantOf(r)
		mu.Lock()
		s, ok := sems[t]
		if !ok {
			s = semaphored(h, workers, 2*workers)
			sems[t] = s
		}
		mu.Unlock()
		s.ServeHTTP(w, r)
	})
}

// gradient2 is go-concurrency-limits' Gradient2 limit (its defaults) in
// its default limiter with strategy st, behind a FIFO blocking limiter
// with a bounded backlog whose requests wait at most the objective;
// withCtx (nil: none) gives the context a request acquires with.
func gradient2(h http.Handler, slo time.Duration, backlog int, st core.Strategy, withCtx func(*http.Request) context.Context) (http.Handler, error) {
	reg := core.EmptyMetricRegistryInstance
	lim := limit.NewDefaultGradient2Limit("realbench", limit.NoopLimitLogger{}, reg)
	dl, err := limiter.NewDefaultLimiter(lim, int64(time.Second), int64(time.Second), int64(100*time.Microsecond), 100,
		st, limit.NoopLimitLogger{}, reg)
	if err != nil {
		return nil, err
	}
	bl := limiter.NewQueueBlockingLimiterFromConfig(dl, limiter.QueueLimiterConfig{
		Ordering: limiter.OrderingFIFO, MaxBacklogSize: backlog, MaxBacklogTimeout: slo, BacklogEvictDoneCtx: true})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		if withCtx != nil {
			ctx = withCtx(r)
		}
		token, ok := bl.Acquire(ctx)
		if !ok {
			if token != nil {
				token.OnDropped()
			}
			http.Error(w, "limit", http.StatusServiceUnavailable)
			return
		}
		h.ServeHTTP(w, r)
		token.OnSuccess()
	}), nil
}

// gradient2Partitioned is gradient2 with go-concurrency-limits' lookup
// partition strategy in place of its simple one: interactive requests
// (/small) get 80 % of the limit, batch ones (/large) 20 %.
func gradient2Partitioned(h http.Handler, slo time.Duration, backlog int) (http.Handler, error) {
	reg := core.EmptyMetricRegistryInstance
	parts := map[string]*strategy.LookupPartition{
		"interactive": strategy.NewLookupPartitionWithMetricRegistry("interactive", 0.8, 200, reg),
		"batch":       strategy.NewLookupPartitionWithMetricRegistry("batch", 0.2, 200, reg),
	}
	st, err := strategy.NewLookupPartitionStrategyWithMetricRegistry(parts, func(ctx context.Context) string {
		k, _ := ctx.Value(kindKey{}).(string)
		return k
	}, 200, reg)
	if err != nil {
		return nil, err
	}
	return gradient2(h, slo, backlog, st, func(r *http.Request) context.Context {
		kind := "interactive"
		if r.URL.Path == "/large" {
			kind = "batch"
		}
		return context.WithValue(r.Context(), kindKey{}, kind)
	})
}

// kindKey carries a request's kind to the partition lookup.
type kindKey struct{}

// status503 turns failsafehttp's 429 for a refusal into the 503 every
// variant answers.
func status503(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(&recode{ResponseWriter: w}, r)
	})
}

type recode struct{ http.ResponseWriter }

func (w *recode) WriteHeader(code int) {
	if code == http.StatusTooManyRequests {
		code = http.StatusServiceUnavailable
	}
	w.ResponseWriter.WriteHeader(code)
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
