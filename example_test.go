package cpuwork_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/cpuwork/cpuwork"
	"github.com/cpuwork/cpuwork/account"
)

func ExampleNew() {
	// Zero Options: one slot per whole core of the CPU budget (cgroup quota
	// and affinity), following changes.
	e, err := cpuwork.New(cpuwork.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Close(context.Background())
	fmt.Println(e.Stats().Slots >= 1)
	// Output: true
}

func ExampleExecutor_Do() {
	e, _ := cpuwork.New(cpuwork.Options{Slots: 2})
	defer e.Close(context.Background())

	var sum [32]byte
	err := e.Do(context.Background(), cpuwork.Interactive, func(ctx context.Context) error {
		sum = sha256.Sum256([]byte("hello")) // CPU-bound work, on this goroutine
		return nil
	})
	if errors.Is(err, cpuwork.ErrSaturated) {
		fmt.Println("shed: reply 503")
		return
	}
	fmt.Printf("%x\n", sum[:4])
	// Output: 2cf24dba
}

func ExampleExecutor_For() {
	e, _ := cpuwork.New(cpuwork.Options{Slots: 2})
	defer e.Close(context.Background())

	data := make([]float64, 100_000)
	for i := range data {
		data[i] = float64(i)
	}
	err := e.For(context.Background(), cpuwork.Batch, len(data), func(lo, hi int) error {
		for i := lo; i < hi; i++ {
			data[i] *= 2
		}
		return nil
	})
	fmt.Println(err, data[99_999])
	// Output: <nil> 199998
}

func ExampleCheckpoint() {
	e, _ := cpuwork.New(cpuwork.Options{Slots: 1})
	defer e.Close(context.Background())

	err := e.Do(context.Background(), cpuwork.Batch, func(ctx context.Context) error {
		h := sha256.New()
		block := make([]byte, 4096)
		for i := 0; i < 1000; i++ {
			// Hands the slot to Critical work that waits, yields the P to
			// runnable goroutines and due timers, reports cancellation.
			if err := cpuwork.Checkpoint(ctx); err != nil {
				return err
			}
			h.Write(block)
		}
		return nil
	})
	fmt.Println(err)
	// Output: <nil>
}

func ExampleWithTarget() {
	e, _ := cpuwork.New(cpuwork.Options{Slots: 1})
	defer e.Close(context.Background())

	// In a handler, when the request arrives: the service's objective
	// (200 ms) and, if known, the request's run time. Requests that wait
	// are served earliest due first; one that can no longer make it is
	// refused at once rather than served late.
	ctx := cpuwork.WithTarget(context.Background(), cpuwork.Target{Latency: 200 * time.Millisecond, Service: 5 * time.Millisecond})
	err := e.Do(ctx, cpuwork.Interactive, func(ctx context.Context) error {
		return nil // the request's CPU work
	})
	switch {
	case errors.Is(err, cpuwork.ErrDeadline):
		fmt.Println("too late to meet the target: reply 503 now")
	case err != nil:
		fmt.Println(err)
	default:
		fmt.Println("served")
	}
	// Output: served
}

func ExampleExecutor_Allow() {
	e, _ := cpuwork.New(cpuwork.Options{Slots: 2})
	defer e.Close(context.Background())

	handler := func(w http.ResponseWriter, r *http.Request) {
		// The target first, then the door's verdict before the large
		// body is read: a request that would be refused costs no read.
		ctx := cpuwork.WithTarget(r.Context(), cpuwork.Target{Latency: 200 * time.Millisecond, Service: 40 * time.Millisecond})
		if err := e.Allow(ctx, cpuwork.Interactive); err != nil {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		err = e.Do(ctx, cpuwork.Interactive, func(ctx context.Context) error {
			_ = body // the request's CPU work
			return nil
		})
		switch {
		case errors.Is(err, cpuwork.ErrSaturated): // refused at the door after all
			http.Error(w, "busy", http.StatusServiceUnavailable)
		case err != nil:
			http.Error(w, err.Error(), http.StatusInternalServerError)
		default:
			fmt.Fprintln(w, "done")
		}
	}
	rec := httptest.NewRecorder()
	handler(rec, httptest.NewRequest("POST", "/infer", strings.NewReader("tensor")))
	fmt.Print(rec.Code, " ", rec.Body.String())
	// Output: 200 done
}

func ExampleStats_slowTasks() {
	// Account every task (the default is one in 1024).
	e, _ := cpuwork.New(cpuwork.Options{Slots: 1, Account: account.Options{Every: 1}})
	defer e.Close(context.Background())

	e.Do(context.Background(), cpuwork.Interactive, func(ctx context.Context) error {
		time.Sleep(2 * time.Millisecond) // blocking: mostly other (neither on a CPU nor queued)
		return nil
	})
	for _, a := range e.Stats().SlowTasks {
		var sum time.Duration
		for _, d := range a.Parts {
			sum += d
		}
		// The parts (queue wait, on-CPU, kernel run queue, throttled, Go
		// run queue, GC, other) sum to the task's latency from arrival.
		fmt.Println(a.Class, sum == a.Wall, a.Wall >= 2*time.Millisecond)
	}
	// Output: interactive true true
}

// A service whose CPU-bound handlers call Checkpoint serves its listener
// through WatchListener: requests that arrive while every P is busy are
// read within ~200 µs, not after sysmon's 10 ms network poll.
func ExampleWatchListener() {
	exec, err := cpuwork.New(cpuwork.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer exec.Close(context.Background())
	http.HandleFunc("/render", func(w http.ResponseWriter, r *http.Request) {
		err := exec.Do(r.Context(), cpuwork.Interactive, func(ctx context.Context) error {
			for i := 0; i < 1000; i++ {
				// ... a slice of CPU-bound work ...
				if err := cpuwork.Checkpoint(ctx); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		}
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(cpuwork.WatchListener(ln))
	srv.Close()
}

func ExampleWithKey() {
	e, _ := cpuwork.New(cpuwork.Options{Slots: 1})
	defer e.Close(context.Background())

	// In a handler: the request's tenant shares its class's slots fairly
	// with the other tenants. A tenant past its share queues behind the
	// others and is the first refused when the class sheds.
	serve := func(ctx context.Context, tenant string) error {
		ctx = cpuwork.WithKey(ctx, tenant)
		return e.Do(ctx, cpuwork.Interactive, func(ctx context.Context) error {
			_ = sha256.Sum256([]byte(tenant)) // the request's CPU-bound work
			return nil
		})
	}
	fmt.Println(serve(context.Background(), "tenant-a"))
	// Output: <nil>
}
