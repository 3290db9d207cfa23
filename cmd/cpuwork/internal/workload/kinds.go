package workload

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"image"
	_ "image/gif" // decoders for GOROOT's test images
	"image/jpeg"
	_ "image/png"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"time"

	kzstd "github.com/klauspost/compress/zstd"
	"golang.org/x/image/draw"
	"golang.org/x/sys/unix"
)

type hashWL struct {
	items [][]byte
	sums  [][32]byte
}

func newHash(src *Source) (Workload, error) {
	text, err := src.GoText()
	if err != nil {
		return nil, err
	}
	w := &hashWL{items: chunks(text, 64<<10, 64)}
	for _, c := range w.items {
		w.sums = append(w.sums, sha256.Sum256(c))
	}
	return w, nil
}

func (w *hashWL) Name() string { return "hash" }
func (w *hashWL) Run(i int) error {
	i %= len(w.items)
	if sha256.Sum256(w.items[i]) != w.sums[i] {
		return fmt.Errorf("hash: chunk %d digest mismatch", i)
	}
	return nil
}

type gzipWL struct{ items [][]byte }

func newGzip(src *Source) (Workload, error) {
	text, err := src.GoText()
	if err != nil {
		return nil, err
	}
	return &gzipWL{items: chunks(text, 1<<20, 8)}, nil
}

func (w *gzipWL) Name() string { return "gzip" }
func (w *gzipWL) Run(i int) error {
	in := w.items[i%len(w.items)]
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(in); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	zr, err := gzip.NewReader(&buf)
	if err != nil {
		return err
	}
	out, err := io.ReadAll(zr)
	if err != nil {
		return err
	}
	if !bytes.Equal(out, in) {
		return fmt.Errorf("gzip: round trip of item %d differs", i)
	}
	return nil
}

type regexpWL struct {
	re    *regexp.Regexp
	items [][]byte
	want  []int
}

func newRegexp(src *Source) (Workload, error) {
	text, err := src.GoText()
	if err != nil {
		return nil, err
	}
	w := &regexpWL{
		re:    regexp.MustCompile(`func (\([a-zA-Z_]+ \*?[A-Z][a-zA-Z0-9]*\) )?[A-Z][a-zA-Z0-9]*\(`),
		items: chunks(text, 64<<10, 64),
	}
	total := 0
	for _, c := range w.items {
		n := len(w.re.FindAllIndex(c, -1))
		w.want = append(w.want, n)
		total += n
	}
	if total == 0 {
		return nil, fmt.Errorf("regexp: no matches in %d chunks of Go source", len(w.items))
	}
	return w, nil
}

func (w *regexpWL) Name() string { return "regexp" }
func (w *regexpWL) Run(i int) error {
	i %= len(w.items)
	if n := len(w.re.FindAllIndex(w.items[i], -1)); n != w.want[i] {
		return fmt.Errorf("regexp: chunk %d: %d matches, want %d", i, n, w.want[i])
	}
	return nil
}

type jsonWL struct {
	docs [][]byte
	keys []int
}

func newJSON(src *Source) (Workload, error) {
	pattern := filepath.Join(src.GOROOT, "src", "encoding", "json", "internal", "jsontest", "testdata", "*.json.zst")
	files, err := filepath.Glob(pattern)
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("json: no corpora match %s", pattern)
	}
	dec, err := kzstd.NewReader(nil)
	if err != nil {
		return nil, err
	}
	defer dec.Close()
	w := &jsonWL{}
	for _, f := range files {
		z, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		doc, err := dec.DecodeAll(z, nil)
		if err != nil {
			return nil, fmt.Errorf("json: decompress %s: %w", f, err)
		}
		if len(doc) > 4<<20 { // keep items in the 1-30 ms range
			continue
		}
		k, err := topLevel(doc)
		if err != nil {
			return nil, fmt.Errorf("json: %s: %w", f, err)
		}
		w.docs, w.keys = append(w.docs, doc), append(w.keys, k)
	}
	if len(w.docs) == 0 {
		return nil, fmt.Errorf("json: no corpus under 4 MB in %s", pattern)
	}
	return w, nil
}

func topLevel(doc []byte) (int, error) {
	var v any
	if err := json.Unmarshal(doc, &v); err != nil {
		return 0, err
	}
	switch t := v.(type) {
	case map[string]any:
		return len(t), nil
	case []any:
		return len(t), nil
	}
	return 1, nil
}

func (w *jsonWL) Name() string { return "json" }
func (w *jsonWL) Run(i int) error {
	i %= len(w.docs)
	n, err := topLevel(w.docs[i])
	if err != nil {
		return err
	}
	if n != w.keys[i] {
		return fmt.Errorf("json: doc %d: %d top-level entries, want %d", i, n, w.keys[i])
	}
	return nil
}

type thumbWL struct {
	imgs  [][]byte
	names []string
}

func newThumbnail(src *Source) (Workload, error) {
	dir := filepath.Join(src.GOROOT, "src", "image", "testdata")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	w := &thumbWL{}
	for _, e := range entries {
		n := e.Name()
		if !(strings.HasSuffix(n, ".jpeg") || strings.HasSuffix(n, ".png")) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			return nil, err
		}
		cfg, _, err := image.DecodeConfig(bytes.NewReader(b))
		if err != nil || cfg.Width < 64 || cfg.Height < 64 {
			continue
		}
		w.imgs, w.names = append(w.imgs, b), append(w.names, n)
	}
	if len(w.imgs) == 0 {
		return nil, fmt.Errorf("thumbnail: no decodable JPEG/PNG of at least 64x64 in %s", dir)
	}
	return w, nil
}

func (w *thumbWL) Name() string { return "thumbnail" }
func (w *thumbWL) Run(i int) error {
	i %= len(w.imgs)
	img, _, err := image.Decode(bytes.NewReader(w.imgs[i]))
	if err != nil {
		return fmt.Errorf("thumbnail: decode %s: %w", w.names[i], err)
	}
	b := img.Bounds()
	const tw = 128
	th := max(1, b.Dy()*tw/b.Dx())
	dst := image.NewRGBA(image.Rect(0, 0, tw, th))
	draw.CatmullRom.Scale(dst, dst.Bounds(), img, b, draw.Over, nil)
	var out bytes.Buffer
	if err := jpeg.Encode(&out, dst, &jpeg.Options{Quality: 80}); err != nil {
		return err
	}
	cfg, err := jpeg.DecodeConfig(&out)
	if err != nil || cfg.Width != tw || cfg.Height != th {
		return fmt.Errorf("thumbnail: %s: encoded %dx%d (%v), want %dx%d", w.names[i], cfg.Width, cfg.Height, err, tw, th)
	}
	return nil
}

// Fib is the recursive Fibonacci spinner of the published posts: pure CPU,
// no allocation, a known result.
type Fib struct {
	N    int
	want uint64
}

// NewFib returns the Fib whose n takes closest to d on this machine.
func NewFib(d time.Duration) *Fib {
	best := &Fib{N: 20}
	for n := 20; n < 45; n++ {
		t := time.Now()
		runtime.KeepAlive(fib(n))
		if time.Since(t) > d {
			if n > 20 {
				best.N = n - 1
			}
			break
		}
		best.N = n
	}
	best.want = fib(best.N)
	return best
}

func fib(n int) uint64 {
	if n < 2 {
		return uint64(n)
	}
	return fib(n-1) + fib(n-2)
}

func (f *Fib) Name() string { return "fib" }
func (f *Fib) Run(int) error {
	if got := fib(f.N); got != f.want {
		return fmt.Errorf("fib(%d) = %d, want %d", f.N, got, f.want)
	}
	return nil
}

// Spin is a calibrated CPU loop (a 64-bit LCG): pure CPU for a chosen
// duration, no memory traffic, no syscalls, never a sleep.
type Spin struct {
	Iters int
	D     time.Duration
}

// NewSpin returns a Spin calibrated to take about d on one core of this
// machine (best of 5 timings of a 20 ms probe, each in the calibrating
// thread's CPU time: a probe time-sliced with other processes on a busy
// machine would otherwise calibrate the loop short).
func NewSpin(d time.Duration) *Spin {
	const probe = 4_000_000
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	best := time.Duration(1 << 62)
	for range 5 {
		t := threadCPU()
		spinIters(probe)
		best = min(best, threadCPU()-t)
	}
	iters := int(float64(probe) * float64(d) / float64(max(best, 1)))
	return &Spin{Iters: max(iters, 1), D: d}
}

// threadCPU is the calling thread's CPU time (wall time where the clock
// cannot be read).
func threadCPU() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return time.Duration(time.Now().UnixNano())
	}
	return time.Duration(ts.Nano())
}

// spinIters is never inlined: every caller (the calibration, Run,
// RunChecked) must run the same machine code. Inlined, each got its own
// copy of the loop at its own alignment, and the copies ran at speeds 10-15
// % apart on this machine's CPUs, so a variant that checkpoints (RunChecked)
// did more work per "2 ms" task than one that does not (Run).
//
//go:noinline
func spinIters(n int) uint64 {
	x := uint64(n)
	for i := 0; i < n; i++ {
		x = x*6364136223846793005 + 1442695040888963407
	}
	runtime.KeepAlive(x) // the loop's result is live: the work cannot be optimised away
	return x
}

func (s *Spin) Name() string { return "spin" }
func (s *Spin) Run(int) error {
	spinIters(s.Iters)
	return nil
}

// RunChecked runs the loop in steps of about step iterations, calling check
// between steps (for cpuwork.Checkpoint); it stops at check's first error.
func (s *Spin) RunChecked(steps int, check func() error) error {
	per := max(s.Iters/max(steps, 1), 1)
	for done := 0; done < s.Iters; done += per {
		spinIters(min(per, s.Iters-done))
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}
