package admit

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"time"

	"go.uber.org/automaxprocs/maxprocs"
)

// Flags are the flags every realbench server takes.
type Flags struct {
	Variant, Origin, Procs string
	SLO                    time.Duration
}

// ParseFlags defines and parses the servers' flags: -variant, -origin
// (required when needOrigin), -slo and -procs, and applies -procs:
// "default" leaves Go's own GOMAXPROCS rule (Go >= 1.25: the quota
// rounded up), "automaxprocs" applies go.uber.org/automaxprocs's (the
// quota rounded down, at least 1), as many servers still do. A bad flag
// ends the process with the server's name in the message.
func ParseFlags(name string, needOrigin bool) Flags {
	var f Flags
	flag.StringVar(&f.Variant, "variant", "stock", "an admitter of package admit, or cpuwork")
	flag.StringVar(&f.Origin, "origin", "", "base URL of the origin serving small.jpg and large.jpg")
	flag.DurationVar(&f.SLO, "slo", time.Second, "the latency objective")
	flag.StringVar(&f.Procs, "procs", "default", "GOMAXPROCS: default (Go's rule) or automaxprocs (the quota rounded down)")
	flag.Parse()
	if needOrigin && f.Origin == "" {
		log.Fatalf("%s: -origin is required", name)
	}
	switch f.Procs {
	case "default":
	case "automaxprocs":
		if _, err := maxprocs.Set(); err != nil {
			log.Fatalf("%s: automaxprocs: %v", name, err)
		}
	default:
		log.Fatalf("%s: -procs %q: want default or automaxprocs", name, f.Procs)
	}
	return f
}

// Fetch gets url from the origin with r's context and returns its body;
// on failure it answers w (502) and returns ok false.
func Fetch(w http.ResponseWriter, r *http.Request, client *http.Client, url string) (body []byte, ok bool) {
	req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, url, nil)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return nil, false
	}
	resp, err := client.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return nil, false
	}
	body, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		http.Error(w, fmt.Sprintf("origin: %d %v", resp.StatusCode, err), http.StatusBadGateway)
		return nil, false
	}
	return body, true
}
