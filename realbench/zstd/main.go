// Command zstd is a small compression server on the zstd C library
// through cgo (github.com/DataDog/zstd, which builds zstd's own sources),
// for `cpuwork bench --scenario realserver-zstd`: a second server whose
// work runs in C, outside the Go scheduler's Ps, of another shape than
// the libvips one — another library, the request's own body read first,
// a fetch from the origin inside the handler, and an admitter of its own
// with a queue. It listens on a loopback port, writes "listening ADDR" to
// stdout, and serves until stdin reaches EOF (the bench closes it, or
// dies).
//
// The bench's load generator asks for /small and /large; each fetches
// its source from the origin (-origin), the bench's server of generated
// JPEGs, writes it as hex text and compresses that with zstd in one call:
//
//	/small -> small.jpg (800x600) as hex, at level 19
//	/large -> large.jpg (3000x2000) as hex, at level 12
//
// -procs chooses GOMAXPROCS as such servers do: "default" leaves Go's own
// rule, "automaxprocs" imports go.uber.org/automaxprocs's rule (the quota
// rounded down, at least 1).
//
// Variants (-variant) as package admit names them; the server's own
// admitter is shipped-queue (a semaphore of 2x GOMAXPROCS workers with a
// queue of 8). Every refusal is answered 503.
package main

import (
	"encoding/hex"
	"io"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/DataDog/zstd"
	"github.com/cpuwork/cpuwork/realbench/admit"
)

func main() {
	f := admit.ParseFlags("zstd", true)
	if err := serve(f.Variant, f.Origin, f.SLO, os.Stdout, os.Stdin); err != nil {
		log.Fatal("zstd: ", err)
	}
}

func serve(variant, origin string, slo time.Duration, out io.Writer, stdin io.Reader) error {
	levels := map[string]int{"/small": 19, "/large": 12}
	srcs := map[string]string{"/small": origin + "/small.jpg", "/large": origin + "/large.jpg"}
	client := &http.Client{Timeout: 10 * time.Second}
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		level, ok := levels[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		io.Copy(io.Discard, r.Body) // the request's own body, if any
		buf, ok := admit.Fetch(w, r, client, srcs[r.URL.Path])
		if !ok {
			return
		}
		// Archived as hex text (the archive's format), then compressed in
		// one C call.
		z, err := zstd.CompressLevel(nil, []byte(hex.EncodeToString(buf)), level)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/zstd")
		w.Write(z)
	})
	return admit.Serve(variant, app, slo, out, stdin)
}
