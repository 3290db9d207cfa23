package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/cpuwork/cpuwork"
	"github.com/cpuwork/cpuwork/cmd/cpuwork/internal/workload"
)

// The inference scenario: the first field report's service, an HTTP
// endpoint running ONNX Runtime models through cgo, under open-loop load.

var inferenceVariants = []struct{ name, desc string }{
	{"naive", "a goroutine per request; ONNX Runtime's default intra-op threads (one per core, blind to quotas); a large request runs its images one after another"},
	{"pool", "the field report's fix: GOMAXPROCS workers, intra-op threads 1, a large request split into one task per image"},
	{"cpuwork", "intra-op threads 1 per slot (Go and C never oversubscribe the budget): small requests Executor.Do Interactive, large ones Executor.For Batch over their images on the free slots, yielding to small ones between images; queue-wait targets shed with 503"},
}

const (
	inferenceModel = "squeezenet"
	largeImages    = 4 // images in a large request
)

// inferenceServer is one variant's HTTP handler and its cleanup.
type inferenceServer struct {
	h     http.Handler
	close func()
}

func (r *Runner) inference(loadgen []string) (*Scenario, error) {
	s := &Scenario{Name: "inference", Baseline: "naive",
		Claim: "an ONNX Runtime inference service through cgo (C1: p99 550 -> 120-150 ms and 2.5x throughput from a GOMAXPROCS worker pool, intra-op threads 1 and batches split): bounded slots that lease ORT's threads keep p99 low near capacity"}
	lib, models, err := workload.ONNXPaths()
	if err != nil {
		return nil, err
	}
	if err := workload.InitONNX(lib); err != nil {
		return nil, err
	}
	ref, err := workload.LoadReference(models, inferenceModel)
	if err != nil {
		return nil, err
	}
	// Verify the model before measuring anything: a wrong result fails the run.
	one, err := workload.NewSession(ref, 1)
	if err != nil {
		return nil, err
	}
	out, err := one.Infer(ref.Input)
	if err == nil {
		err = ref.Check(out)
	}
	if err != nil {
		one.Close()
		return nil, fmt.Errorf("%s does not reproduce its reference output: %w", inferenceModel, err)
	}
	start := time.Now()
	for range 5 {
		one.Infer(ref.Input)
	}
	single := time.Since(start) / 5
	one.Close()

	dir, err := os.MkdirTemp("", "cpuwork-inference-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	small, large := filepath.Join(dir, "small.bin"), filepath.Join(dir, "large.bin")
	img := encodeFloats(ref.Input)
	if err := os.WriteFile(small, img, 0o600); err != nil {
		return nil, err
	}
	var batch []byte
	for range largeImages {
		batch = append(batch, img...)
	}
	if err := os.WriteFile(large, batch, 0o600); err != nil {
		return nil, err
	}
	bodies := []string{"--small-body", small, "--large-body", large}

	perReq := (smallShare + (1-smallShare)*largeImages) * single.Seconds()
	estimate := float64(r.slots) / perReq
	// Capacity from the field report's fix (the pool), whose CPU per
	// request is the model's: the naive server's includes the spinning of
	// ONNX Runtime's own threads, which would make every load level look
	// lighter than it is.
	r.step("inference: measuring capacity (pool server at half the estimated capacity)")
	cal := &Variant{Name: "calibration", Valid: true}
	capacity := estimate
	if err := r.inferenceOnce(cal, "pool", ref, estimate/2, loadgen, bodies); err == nil {
		if served := cal.Repeats[0].Extra["served"]; served > 0 && cal.CPU > 0 {
			capacity = float64(r.slots) / (cal.CPU / served)
		}
	} else {
		s.Notes = append(s.Notes, "capacity from the estimate: the calibration run failed: "+err.Error())
	}
	s.Notes = append(s.Notes, fmt.Sprintf("model light_%s (onnx backend test data) through ONNX Runtime (%s), %s per inference on one thread, verified against its reference output before the run and on every response; small = 1 image, large = %d images, 90/10 mix, the request body is the float32 input tensor; capacity %.0f requests/s measured as slots / process CPU per served request of the pool server at %.0f/s (estimate %.0f/s)",
		inferenceModel, filepath.Base(lib), ms(single.Seconds()), largeImages, capacity, estimate/2, estimate))
	s.Notes = append(s.Notes, "not measured here: the same variants under a CPU quota below the host's cores (the server would have to run in a cgroup of its own)")
	loads := []float64{0.5, 0.8, 0.95, 1.1}
	r.atLoads(s, inferenceVariants, loads, func(v *Variant, variant string, load float64) error {
		return r.inferenceOnce(v, variant, ref, capacity*load, loadgen, bodies)
	})
	for _, l := range loads {
		base := s.variant(fmt.Sprintf("naive@%.0f%%", l*100))
		if base.Latency.P99 == 0 {
			continue
		}
		for _, pv := range inferenceVariants {
			v := s.variant(fmt.Sprintf("%s@%.0f%%", pv.name, l*100))
			v.Ratio = ratiosTo(v, base)
		}
	}
	// Capacity at a p99 target of 3x the single-request latency of a large
	// request: the goodput of the highest load whose p99 meets it.
	target := 3 * float64(largeImages) * single.Seconds()
	atTarget := func(name string) float64 {
		best := 0.0
		for _, l := range loads {
			if v := s.variant(fmt.Sprintf("%s@%.0f%%", name, l*100)); v.Valid && v.medianP99() > 0 && v.medianP99() <= target {
				best = max(best, v.Extra["goodput_per_s"])
			}
		}
		return best
	}
	n, c, p := s.variant("naive@95%"), s.variant("cpuwork@95%"), s.variant("pool@95%")
	if n.Valid && c.Valid {
		ratio := c.medianP99() / n.medianP99()
		cn, cc := atTarget("naive"), atTarget("cpuwork")
		capRatio := math.Inf(1)
		if cn > 0 {
			capRatio = cc / cn
		}
		holds := ratio <= 0.5 && capRatio >= 1.5
		reps := min(len(c.Repeats), len(n.Repeats))
		k := agreement(reps, func(i int) bool { return c.Repeats[i].P99/n.Repeats[i].P99 <= 0.5 })
		s.Verdict = fmt.Sprintf("at 95%% of capacity, cpuwork p99 %s = %.2fx naive (%s; expected <= 0.5x; holds in %d/%d repeats), %.1f%% shed; pool p99 %s; goodput at a p99 target of %s: cpuwork %.0f/s, naive %.0f/s, pool %.0f/s (cpuwork/naive %.2fx, expected >= 1.5x): %s",
			ms(c.medianP99()), ratio, ms(n.medianP99()), k, reps, 100*c.Extra["shed_share"], ms(p.medianP99()), ms(target), cc, cn, atTarget("pool"), capRatio, holdsWord(holds))
		s.Holds = boolp(holds)
	}
	return s, nil
}

func encodeFloats(f []float32) []byte {
	b := make([]byte, 4*len(f))
	for i, v := range f {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

func decodeFloats(b []byte) []float32 {
	f := make([]float32, len(b)/4)
	for i := range f {
		f[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return f
}

func (r *Runner) inferenceOnce(v *Variant, variant string, ref *workload.Reference, rate float64, loadgen, bodies []string) error {
	srv, err := r.inferenceServer(variant, ref)
	if err != nil {
		return err
	}
	defer srv.close()
	return r.loadOnce(v, "inference", srv.h, rate, loadgen, bodies...)
}

// inferenceServer builds a variant's handler: /small takes one image,
// /large largeImages; each answers 200 when every output matches the
// reference, 503 when shed, 500 otherwise.
func (r *Runner) inferenceServer(variant string, ref *workload.Reference) (*inferenceServer, error) {
	intraOp := 1
	if variant == "naive" {
		intraOp = 0 // ONNX Runtime's default
	}
	sess, err := workload.NewSession(ref, intraOp)
	if err != nil {
		return nil, err
	}
	infer := func(img []float32) error {
		out, err := sess.Infer(img)
		if err != nil {
			return err
		}
		return ref.Check(out)
	}
	// run runs a request's images: one task per image in the pool, in
	// order on the handler's goroutine otherwise (cpuwork: with a
	// Checkpoint between images).
	var run func(ctx context.Context, class cpuwork.Class, imgs [][]float32) error
	closeFn := sess.Close
	switch variant {
	case "naive":
		run = func(_ context.Context, _ cpuwork.Class, imgs [][]float32) error {
			for _, img := range imgs {
				if err := infer(img); err != nil {
					return err
				}
			}
			return nil
		}
	case "pool":
		type job struct {
			img  []float32
			done chan error
		}
		jobs := make(chan job, 4096)
		var wg sync.WaitGroup
		for range runtime.GOMAXPROCS(0) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range jobs {
					j.done <- infer(j.img)
				}
			}()
		}
		run = func(_ context.Context, _ cpuwork.Class, imgs [][]float32) error {
			done := make(chan error, len(imgs))
			for _, img := range imgs {
				jobs <- job{img, done}
			}
			var first error
			for range imgs {
				if err := <-done; err != nil && first == nil {
					first = err
				}
			}
			return first
		}
		closeFn = func() { close(jobs); wg.Wait(); sess.Close() }
	case "cpuwork":
		var mqw [cpuwork.NumClasses]time.Duration
		mqw[cpuwork.Interactive], mqw[cpuwork.Batch] = 50*time.Millisecond, 200*time.Millisecond
		e, err := cpuwork.New(cpuwork.Options{Slots: r.slots, WatchInterval: -1, MaxQueueWait: mqw,
			QueueLimit: [cpuwork.NumClasses]int{cpuwork.Interactive: 256, cpuwork.Batch: 64}})
		if err != nil {
			sess.Close()
			return nil, err
		}
		run = func(ctx context.Context, class cpuwork.Class, imgs [][]float32) error {
			if len(imgs) == 1 {
				return e.Do(ctx, class, func(context.Context) error { return infer(imgs[0]) })
			}
			// A batch runs on the slots that are free (e.For: the caller's
			// slot plus helpers nobody waits for), one image per chunk, and
			// hands slots to queued small requests between images.
			return e.For(ctx, class, len(imgs), func(lo, hi int) error {
				for _, img := range imgs[lo:hi] {
					if err := infer(img); err != nil {
						return err
					}
				}
				return nil
			})
		}
		closeFn = func() { e.Close(context.Background()); sess.Close() }
	default:
		sess.Close()
		return nil, fmt.Errorf("inference: unknown variant %q", variant)
	}
	n := len(ref.Input)
	handler := func(images int, class cpuwork.Class) http.HandlerFunc {
		return func(w http.ResponseWriter, req *http.Request) {
			body, err := io.ReadAll(io.LimitReader(req.Body, int64(4*n*images+1)))
			if err != nil || len(body) != 4*n*images {
				http.Error(w, fmt.Sprintf("want %d float32 values", n*images), http.StatusBadRequest)
				return
			}
			all := decodeFloats(body)
			imgs := make([][]float32, images)
			for i := range imgs {
				imgs[i] = all[i*n : (i+1)*n]
			}
			switch err := run(req.Context(), class, imgs); {
			case errors.Is(err, cpuwork.ErrSaturated):
				http.Error(w, "saturated", http.StatusServiceUnavailable)
			case err != nil:
				http.Error(w, err.Error(), http.StatusInternalServerError)
			default:
				w.Write([]byte("ok\n"))
			}
		}
	}
	mux := http.NewServeMux()
	mux.Handle("/small", handler(1, cpuwork.Interactive))
	mux.Handle("/large", handler(largeImages, cpuwork.Batch))
	return &inferenceServer{h: mux, close: closeFn}, nil
}
