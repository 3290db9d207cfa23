// Package workload provides real CPU-bound work on real data that every
// machine with Go has (the Go source tree and the test data shipped in
// GOROOT), for cpuwork bench.
//
// Every workload processes one item per Run call and checks its own output
// (a round trip, a known digest, a decoded size), so a broken workload
// returns an error instead of looking fast.
//
//	hash       SHA-256 of a 64 KB chunk of $(go env GOROOT)/src
//	gzip       gzip (level 6) and gunzip of 1 MB of Go source, checked byte for byte
//	regexp     a function-signature regexp over 64 KB of Go source, match count checked
//	json       encoding/json.Unmarshal of GOROOT's JSON test corpora
//	thumbnail  decode, resize to 128 px wide (golang.org/x/image/draw) and JPEG-encode GOROOT's test images
//	zstd-cgo   zstd level 3 through cgo (github.com/DataDog/zstd) of 64 KB, round-trip checked
//	fib        recursive Fibonacci, the calibrated spinner of the published posts
package workload

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Workload is one kind of CPU-bound work. Run is safe for concurrent use.
type Workload interface {
	// Name is the workload's short name ("hash", "gzip", ...).
	Name() string
	// Run processes item i (taken modulo the number of items) and checks
	// the result; it returns an error when the output is wrong.
	Run(i int) error
}

type constructor func(src *Source) (Workload, error)

var registry = map[string]constructor{
	"hash":      newHash,
	"gzip":      newGzip,
	"regexp":    newRegexp,
	"json":      newJSON,
	"thumbnail": newThumbnail,
	"zstd-cgo":  newZstd,
	"fib":       func(*Source) (Workload, error) { return NewFib(1500 * time.Microsecond), nil },
}

// Names lists the workloads, sorted.
func Names() []string {
	n := make([]string, 0, len(registry))
	for k := range registry {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

// New returns the named workload reading its data from src.
func New(name string, src *Source) (Workload, error) {
	c, ok := registry[name]
	if !ok {
		return nil, fmt.Errorf("workload: unknown workload %q (have %s)", name, strings.Join(Names(), ", "))
	}
	w, err := c(src)
	if err != nil {
		return nil, fmt.Errorf("workload %s: %w", name, err)
	}
	return w, nil
}

// Calibrate runs w on one goroutine and returns the median time per item
// over n items (after one warm-up item).
func Calibrate(w Workload, n int) (time.Duration, error) {
	if err := w.Run(0); err != nil {
		return 0, err
	}
	d := make([]time.Duration, n)
	for i := range d {
		t := time.Now()
		if err := w.Run(i + 1); err != nil {
			return 0, err
		}
		d[i] = time.Since(t)
	}
	slices.Sort(d)
	return d[len(d)/2], nil
}

// Source is the Go installation whose files the workloads read.
type Source struct {
	GOROOT string

	once  sync.Once
	text  []byte // concatenated .go files of GOROOT/src, up to textLimit
	err   error
	limit int
}

// textLimit bounds how much Go source is loaded (the tree is ~128 MB).
const textLimit = 16 << 20

// NewSource finds GOROOT: the GOROOT environment variable if it holds src,
// else `go env GOROOT`.
func NewSource() (*Source, error) {
	for _, root := range []string{os.Getenv("GOROOT"), goEnvGOROOT()} {
		if root == "" {
			continue
		}
		if fi, err := os.Stat(filepath.Join(root, "src", "runtime")); err == nil && fi.IsDir() {
			return &Source{GOROOT: root, limit: textLimit}, nil
		}
	}
	return nil, errors.New("workload: cannot find GOROOT/src (set GOROOT or put go on PATH)")
}

func goEnvGOROOT() string {
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// GoText returns up to 16 MB of concatenated Go source from GOROOT/src, in
// a stable (lexical) file order.
func (s *Source) GoText() ([]byte, error) {
	s.once.Do(func() {
		root := filepath.Join(s.GOROOT, "src")
		var files []string
		s.err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && (d.Name() == "testdata" || d.Name() == "vendor") {
				return filepath.SkipDir
			}
			if !d.IsDir() && strings.HasSuffix(p, ".go") {
				files = append(files, p)
			}
			return nil
		})
		sort.Strings(files)
		buf := make([]byte, 0, s.limit)
		for _, f := range files {
			if len(buf) >= s.limit {
				break
			}
			b, err := os.ReadFile(f)
			if err != nil {
				s.err = err
				return
			}
			buf = append(buf, b...)
		}
		if len(buf) > s.limit {
			buf = buf[:s.limit]
		}
		if len(buf) < 1<<20 {
			s.err = fmt.Errorf("only %d bytes of Go source under %s", len(buf), root)
		}
		s.text = buf
	})
	return s.text, s.err
}

// chunks splits text into n chunks of size bytes (n*size <= len(text)).
func chunks(text []byte, size, n int) [][]byte {
	n = min(n, len(text)/size)
	out := make([][]byte, n)
	for i := range out {
		out[i] = text[i*size : (i+1)*size]
	}
	return out
}
