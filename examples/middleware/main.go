// Command middleware is README's middleware adoption as a complete
// program: a CPU-bound HTTP server with its own mux and its own /debug/
// handlers (net/http/pprof) that adopts cpuwork by wrapping its handler
// as it is. The lines between "cpuwork:" and "end cpuwork" are what the
// adoption adds; README shows them, and a test checks that README's
// block is this one and runs the program.
//
// Flags: -addr (default :8080).
package main

import (
	"context"
	"crypto/sha256"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"time"

	"github.com/cpuwork/cpuwork"
	"github.com/cpuwork/cpuwork/cpuworkhttp"
	"github.com/cpuwork/cpuwork/schedstat"
)

func main() {
	addr := flag.String("addr", ":8080", "listen address")
	flag.Parse()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	if err := serve(ln); err != nil {
		log.Fatal(err)
	}
}

// serve serves the server on ln until it fails.
func serve(ln net.Listener) error {
	mux := http.NewServeMux() // the server's own routing, unchanged
	mux.HandleFunc("/hash", hash)
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)

	// cpuwork: the adoption.
	exec, err := cpuwork.New(cpuwork.Options{}) // slots from the CPU budget
	if err != nil {
		return err
	}
	defer exec.Close(context.Background())
	h := cpuworkhttp.Handler(exec, mux, cpuworkhttp.Options{Objective: time.Second}) // /debug/ bypasses admission
	// end cpuwork

	// cpuwork doctor: what it reads of the executor, at /debug/cpuwork.
	sampler, err := schedstat.Start(schedstat.Options{})
	if err != nil {
		return err
	}
	defer sampler.Close()
	mux.Handle("/debug/cpuwork", schedstat.Handler(sampler, func() any { return exec.Stats() }))
	// end cpuwork doctor

	return cpuworkhttp.Serve(&http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}, ln)
}

// hash hashes 64 KiB ?rounds times (default 200): CPU-bound work that
// calls cpuwork.Checkpoint between rounds, so that more urgent work gets
// the slot.
func hash(w http.ResponseWriter, r *http.Request) {
	n := 200
	if q := r.URL.Query().Get("rounds"); q != "" {
		v, err := strconv.Atoi(q)
		if err != nil || v < 1 || v > 100_000 {
			http.Error(w, "rounds: 1..100000", http.StatusBadRequest)
			return
		}
		n = v
	}
	buf := make([]byte, 64<<10)
	h := sha256.New()
	sum := make([]byte, 0, sha256.Size)
	for i := range n {
		if err := cpuwork.Checkpoint(r.Context()); err != nil {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		buf[0] = byte(i)
		h.Reset()
		h.Write(buf)
		h.Write(sum)
		sum = h.Sum(sum[:0])
	}
	fmt.Fprintf(w, "%x\n", sum[:8])
}
