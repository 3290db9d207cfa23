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
// Variants (-variant): stock, or behind one of the admitters of package
// admit (sem, sem2x, failsafe, gradient2, cpuwork); every refusal is
// answered 503, which the bench counts as shed.
package main

import (
	"io"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/cpuwork/cpuwork/realbench/admit"
	"willnorris.com/go/imageproxy"
)

func main() {
	f := admit.ParseFlags("imageproxy", true)
	if err := serve(f.Variant, f.Origin, f.SLO, os.Stdout, os.Stdin); err != nil {
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
	return admit.Serve(variant, app, slo, out, stdin)
}
