package doctor

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"
)

// zeros reads n zero bytes without holding them.
func zeros(n int64) io.Reader { return io.LimitReader(zeroReader{}, n) }

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// allocated returns the bytes fn allocated on the heap.
func allocated(fn func()) uint64 {
	var a, b runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&a)
	fn()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

// A target's /debug/pprof/profile that answers a small gzip of a huge
// body, or a huge plain body, is refused as too large once the cap is
// passed, without reading or inflating the rest.
func TestEveryProfileBodyIsBounded(t *testing.T) {
	// 1 GiB of zeros in about 1 MB: 1,024 gzip members of 1 MiB each
	// (a gzip reader reads concatenated members as one stream).
	var member, bomb bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&member, gzip.BestCompression)
	io.Copy(zw, zeros(1<<20))
	zw.Close()
	for range 1024 {
		bomb.Write(member.Bytes())
	}
	for _, tc := range []struct {
		name string
		body func() io.Reader
	}{
		{"gzip bomb", func() io.Reader { return bytes.NewReader(bomb.Bytes()) }},
		{"plain body past the cap", func() io.Reader { return zeros(1 << 30) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(w, tc.body())
			}))
			defer srv.Close()
			var err error
			n := allocated(func() { _, err = fetchProfile(context.Background(), srv.URL, "", time.Second) })
			var tl *tooLargeError
			if !errors.As(err, &tl) || !strings.Contains(err.Error(), "too large") {
				t.Errorf("error %v, want too large", err)
			}
			// Reading up to the cap allocates a few times the cap as the
			// buffer grows (more under the race detector); reading the
			// whole body allocates gigabytes.
			if n > 8*maxProfileData {
				t.Errorf("reading it allocated %d MiB (cap %d MiB decompressed)", n>>20, maxProfileData>>20)
			}
		})
	}
}

func TestTheDebugBodyIsBounded(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"sample":{"x":"`)
		io.Copy(w, io.LimitReader(strings.NewReader(strings.Repeat("a", 8<<20)), 8<<20))
		io.WriteString(w, `"}}`)
	}))
	defer srv.Close()
	_, _, err := fetch(context.Background(), srv.URL)
	if err == nil || !strings.Contains(err.Error(), "too large") {
		t.Errorf("an 8 MiB /debug/cpuwork: %v, want too large", err)
	}
}

func TestTheTraceIsBounded(t *testing.T) {
	r := capped(zeros(maxTraceBody+1), maxTraceBody, "the trace")
	n, err := io.Copy(io.Discard, r)
	if n != maxTraceBody || err == nil || !strings.Contains(err.Error(), "too large") {
		t.Errorf("read %d, %v; want %d then too large", n, err, maxTraceBody)
	}
	if n, err := io.Copy(io.Discard, capped(zeros(100), 100, "x")); n != 100 || err != nil {
		t.Errorf("a body of exactly the cap: %d, %v", n, err)
	}
}
