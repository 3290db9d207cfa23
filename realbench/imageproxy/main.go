// Command imageproxy serves willnorris.com/go/imageproxy as it ships
// (v0.13.0, from the Go module proxy), stock or behind one of the
// admitters a Go team would put in front of it, for `cpuwork bench
// --scenario realserver`. It listens on a loopback port, writes
// "listening ADDR" to stdout, and serves until stdin reaches EOF (the
// bench closes it, or dies).
//
// The bench's load generator asks for /small and /large; they are
// rewritten to imageproxy's own URLs against the origin (-origin), the
// bench's server of generated JPEGs:
//
//	/small -> /200x150/ORIGIN/small.jpg   (a thumbnail of an 800x600 photo)
//	/large -> /600x400,sc/ORIGIN/large.jpg (a smart crop of a 3000x2000 one)
//
// Variants (-variant):
//
//	stock      imageproxy.NewProxy as is: every request runs at once
//	sem        imgproxy's admitter: an x/sync semaphore of GOMAXPROCS
//	           workers and a queue of 2x that, 503 when the queue is full
//	sem2x      the same with 2x GOMAXPROCS workers (imgproxy's default)
//	failsafe   failsafe-go's adaptive limiter with its queue (limit x 2 to
//	           x 3, waiting at most the objective), through failsafehttp
//	gradient2  go-concurrency-limits' Gradient2 limit behind its FIFO
//	           blocking limiter (a backlog of 2x GOMAXPROCS x 4, waiting
//	           at most the objective), 503 when refused
//	cpuwork    the cpuworkhttp middleware with the objective (-slo),
//	           served through cpuwork.WatchListener
//
// Every refusal is answered 503, which the bench counts as shed.
package main

import (
	"context"

	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/cpuwork/cpuwork"
	"github.com/cpuwork/cpuwork/cpuworkhttp"
	"github.com/failsafe-go/failsafe-go/adaptivelimiter"
	"github.com/failsafe-go/failsafe-go/failsafehttp"
	"github.com/platinummonkey/go-concurrency-limits/core"
	"github.com/platinummonkey/go-concurrency-limits/limit"
	"github.com/platinummonkey/go-concurrency-limits/limiter"
	"github.com/platinummonkey/go-concurrency-limits/strategy"
	"golang.org/x/sync/semaphore"
	"willnorris.com/go/imageproxy"
)

func main() {
	variant := flag.String("variant", "stock", "stock, sem, sem2x, failsafe, gradient2 or cpuwork")
	origin := flag.String("origin", "", "base URL of the origin serving small.jpg and large.jpg")
	slo := flag.Duration("slo", time.Second, "the latency objective")
	flag.Parse()
	if *origin == "" {
		log.Fatal("imageproxy: -origin is required")
	}
	if err := serve(*variant, *origin, *slo, os.Stdout, os.Stdin); err != nil {
		log.Fatal("imageproxy: ", err)
	}
}

func serve(variant, origin string, slo time.Duration, out io.Writer, stdin io.Reader) error {
	proxy := imageproxy.NewProxy(nil, nil)
	paths := map[string]string{
		"/small": "/200x150/" + origin + "/small.jpg",
		"/large": "/600x400,sc/" + origin + "/large.jpg",
	}
	var app http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ok := paths[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		r2 := r.Clone(r.Context())
		r2.URL.Path, r2.URL.RawPath, r2.RequestURI = p, "", p
		proxy.ServeHTTP(w, r2)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	gmp := runtime.GOMAXPROCS(0)
	h := app
	switch variant {
	case "stock":
	case "sem":
		h = semaphored(app, gmp, 2*gmp)
	case "sem2x":
		h = semaphored(app, 2*gmp, 4*gmp)
	case "failsafe":
		lim := adaptivelimiter.NewBuilder[*http.Response]().WithQueueing(2, 3).WithMaxWaitTime(slo).Build()
		h = status503(failsafehttp.NewHandler(app, lim))
	case "gradient2":
		h, err = gradient2(app, slo, 8*gmp)
		if err != nil {
			return err
		}
	case "cpuwork":
		e, err := cpuwork.New(cpuwork.Options{})
		if err != nil {
			return err
		}
		defer e.Close(context.Background())
		h = cpuworkhttp.Handler(e, app, cpuworkhttp.Options{Objective: slo})
		ln = cpuwork.WatchListener(ln)
	default:
		return fmt.Errorf("unknown variant %q", variant)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	fmt.Fprintf(out, "listening %s\n", ln.Addr())
	io.Copy(io.Discard, stdin)
	return nil
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

// gradient2 is go-concurrency-limits' Gradient2 limit (its defaults) in
// its default limiter, behind a FIFO blocking limiter with a bounded
// backlog whose requests wait at most the objective.
func gradient2(h http.Handler, slo time.Duration, backlog int) (http.Handler, error) {
	lim := limit.NewDefaultGradient2Limit("imageproxy", limit.NoopLimitLogger{}, core.EmptyMetricRegistryInstance)
	dl, err := limiter.NewDefaultLimiter(lim, int64(time.Second), int64(time.Second), int64(100*time.Microsecond), 100,
		strategy.NewSimpleStrategy(200), limit.NoopLimitLogger{}, core.EmptyMetricRegistryInstance)
	if err != nil {
		return nil, err
	}
	bl := limiter.NewQueueBlockingLimiterFromConfig(dl, limiter.QueueLimiterConfig{
		Ordering: limiter.OrderingFIFO, MaxBacklogSize: backlog, MaxBacklogTimeout: slo, BacklogEvictDoneCtx: true})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := bl.Acquire(r.Context())
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
