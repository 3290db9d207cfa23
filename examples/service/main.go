// Command service is a small CPU-bound HTTP service run the way cpuwork
// recommends, the one deploy/kubernetes deploys:
//
//   - GOMAXPROCS is left to the Go runtime (Go >= 1.25 follows the
//     container's CPU limit) and the executor sizes its slots from the real
//     budget (the quota's whole cores, plus a paced slot for its
//     fraction; ancestors included), so CPU-bound work never runs on more
//     threads than the quota pays for;
//   - /hash runs its work through Executor.Do as Interactive; /batch as
//     Batch; a request the executor cannot serve in time answers 503
//     (ClassOptions.MaxQueueWait), so a client or a load balancer retries
//     elsewhere instead of queueing;
//   - /metrics exports the executor and the process's scheduling signals
//     (package prom): cpuwork_queue_wait_seconds is what the
//     HorizontalPodAutoscaler scales on;
//   - /debug/cpuwork serves the schedstat sampler for `cpuwork doctor --url`;
//   - /debug/cpuwork/trace serves its recent requests (Options.Record) for
//     `cpuwork simulate --from`; with -observe the executor enforces
//     nothing (every request runs at once) and only records them.
//
// Flags: -addr (default :8080), -observe.
package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/cpuwork/cpuwork"
	"github.com/cpuwork/cpuwork/cpuworkhttp"
	"github.com/cpuwork/cpuwork/prom"
	"github.com/cpuwork/cpuwork/schedstat"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func main() {
	addr := flag.String("addr", ":8080", "listen address")
	observe := flag.Bool("observe", false, "enforce nothing: run every request at once and record it for `cpuwork simulate --from`")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	srv, cleanup, err := newServer(log, *observe)
	if err != nil {
		log.Error("start", "err", err)
		os.Exit(1)
	}
	defer cleanup()
	hs := &http.Server{Addr: *addr, Handler: srv, ReadHeaderTimeout: 5 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		hs.Shutdown(shut)
	}()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Error("listen", "err", err)
		os.Exit(1)
	}
	log.Info("listening", "addr", ln.Addr())
	// With every P busy, Go polls the network only every 10 ms; the
	// handlers' Checkpoints wake it when a request arrives.
	if err := hs.Serve(cpuwork.WatchListener(ln)); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Error("serve", "err", err)
		os.Exit(1)
	}
}

// newServer builds the service's handler; cleanup closes the executor and
// the sampler.
func newServer(log *slog.Logger, observe bool) (http.Handler, func(), error) {
	e, err := cpuwork.New(cpuwork.Options{Logger: log, Classes: [4]cpuwork.ClassOptions{
		cpuwork.Interactive: {MaxQueueWait: 20 * time.Millisecond},
		cpuwork.Batch:       {MaxQueueWait: 500 * time.Millisecond},
	}, Record: cpuwork.RecordOptions{Requests: cpuwork.DefaultRecordRequests, Observe: observe}})
	if err != nil {
		return nil, nil, err
	}
	s, err := schedstat.Start(schedstat.Options{TimerCanary: true})
	if err != nil {
		e.Close(context.Background())
		return nil, nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(prom.NewCollector(e, prom.Options{}))
	mux := http.NewServeMux()
	mux.Handle("/hash", work(e, cpuwork.Interactive, 200))
	mux.Handle("/batch", work(e, cpuwork.Batch, 20000))
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("/debug/cpuwork", schedstat.Handler(s, func() any { return e.Stats() }))
	mux.Handle(cpuworkhttp.TracePath, cpuworkhttp.TraceHandler(e))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	return mux, func() { s.Close(); e.Close(context.Background()) }, nil
}

// work hashes 64 KB rounds times (?rounds=N overrides), under class c.
func work(e *cpuwork.Executor, c cpuwork.Class, rounds int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		n := rounds
		if q := r.URL.Query().Get("rounds"); q != "" {
			v, err := strconv.Atoi(q)
			if err != nil || v < 1 || v > 1_000_000 {
				http.Error(w, "rounds: 1..1000000", http.StatusBadRequest)
				return
			}
			n = v
		}
		var sum [32]byte
		err := e.Do(r.Context(), c, func(ctx context.Context) error {
			buf := make([]byte, 64<<10)
			for i := range n {
				if i%16 == 0 {
					if err := cpuwork.Checkpoint(ctx); err != nil {
						return err
					}
				}
				sum = sha256.Sum256(buf)
				buf[0] = sum[0]
			}
			return nil
		})
		switch {
		case errors.Is(err, cpuwork.ErrSaturated):
			http.Error(w, "busy", http.StatusServiceUnavailable)
		case err != nil:
			http.Error(w, err.Error(), http.StatusInternalServerError)
		default:
			fmt.Fprintf(w, "%x\n", sum[:8])
		}
	}
}
