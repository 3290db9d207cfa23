// Command vips is a small image server on libvips through cgo
// (github.com/h2non/bimg v1.1.9, Debian's libvips), written as bimg's
// README shows, for `cpuwork bench --scenario realserver-vips`: the kind
// of server whose work runs in C, outside the Go scheduler's Ps. It
// listens on a loopback port, writes "listening ADDR" to stdout, and
// serves until stdin reaches EOF (the bench closes it, or dies).
//
// The bench's load generator asks for /small and /large; each fetches
// its source from the origin (-origin), the bench's server of generated
// JPEGs, and resizes it with libvips:
//
//	/small -> small.jpg (800x600) resized to 300 px wide, JPEG
//	/large -> large.jpg (3000x2000) resized to 1024 px wide, JPEG
//
// -procs chooses GOMAXPROCS as such servers do: "default" leaves Go's own
// rule (Go >= 1.25: the quota rounded up), "automaxprocs" imports
// go.uber.org/automaxprocs's rule (the quota rounded down, at least 1),
// which many servers still do.
//
// Variants (-variant): stock; the admitter servers like imaginary ship,
// an x/sync semaphore of 2x GOMAXPROCS workers, with no queue (shipped)
// or a queue of 8 (shipped-queue); failsafe-go's adaptive limiter; or
// cpuwork's middleware (package admit). Every refusal is answered 503.
package main

import (
	"io"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/cpuwork/cpuwork/realbench/admit"
	"github.com/h2non/bimg"
)

func main() {
	f := admit.ParseFlags("vips", true)
	bimg.VipsCacheSetMax(0) // every request does its work: no operation cache
	if err := serve(f.Variant, f.Origin, f.SLO, os.Stdout, os.Stdin); err != nil {
		log.Fatal("vips: ", err)
	}
}

func serve(variant, origin string, slo time.Duration, out io.Writer, stdin io.Reader) error {
	widths := map[string]int{"/small": 300, "/large": 1024}
	srcs := map[string]string{"/small": origin + "/small.jpg", "/large": origin + "/large.jpg"}
	client := &http.Client{Timeout: 10 * time.Second}
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		width, ok := widths[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		buf, ok := admit.Fetch(w, r, client, srcs[r.URL.Path])
		if !ok {
			return
		}
		img, err := bimg.NewImage(buf).Process(bimg.Options{Width: width, Type: bimg.JPEG, Quality: 80})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "image/jpeg")
		w.Write(img)
	})
	return admit.Serve(variant, app, slo, out, stdin)
}
