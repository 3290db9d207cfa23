package cpuworkhttp_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/cpuwork/cpuwork"
	"github.com/cpuwork/cpuwork/cpuworkhttp"
)

// A CPU-bound endpoint admitted through an executor: every request runs
// under a slot, in order of its 1 s objective; /report as Batch. A request
// the executor cannot serve in time is answered 503 with Retry-After
// before its body is read. In a server, serve it with
// cpuworkhttp.ListenAndServe(&http.Server{Addr: ":8080", Handler: h}).
func Example() {
	e, err := cpuwork.New(cpuwork.Options{})
	if err != nil {
		panic(err)
	}
	defer e.Close(context.Background())

	mux := http.NewServeMux()
	mux.HandleFunc("/hash", func(w http.ResponseWriter, r *http.Request) {
		sum := sha256.Sum256([]byte(r.URL.Query().Get("s")))
		for range 1000 {
			if err := cpuwork.Checkpoint(r.Context()); err != nil {
				return // the executor is closing or the client left
			}
			sum = sha256.Sum256(sum[:])
		}
		fmt.Fprintf(w, "%x", sum[:4])
	})
	h := cpuworkhttp.Handler(e, mux, cpuworkhttp.Options{
		Objective: time.Second,
		Class: func(r *http.Request) cpuwork.Class {
			if r.URL.Path == "/report" {
				return cpuwork.Batch
			}
			return cpuwork.Interactive
		},
	})

	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/hash?s=cpuwork")
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, len(body))
	// Output: 200 8
}
