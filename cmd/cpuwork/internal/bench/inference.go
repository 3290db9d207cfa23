package bench

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/cpuwork/cpuwork"
	"github.com/cpuwork/cpuwork/cgroup"
	"github.com/cpuwork/cpuwork/cmd/cpuwork/internal/workload"
	"github.com/cpuwork/cpuwork/schedstat"
)

// The inference scenario: the first field report's service, an HTTP
// endpoint running ONNX Runtime models through cgo, under open-loop load.

var inferenceVariants = []struct{ name, desc string }{
	{"naive", "a goroutine per request; ONNX Runtime's default intra-op threads (one per core, blind to quotas); a large request runs its images one after another"},
	{"pool", "the field report's fix: GOMAXPROCS workers, intra-op threads 1, a large request split into one task per image"},
	{"cpuwork", "intra-op threads 1 per slot (Go and C never oversubscribe the budget): small requests Executor.Do Interactive, large ones Executor.For Batch over their images on the free slots, yielding to small ones between images; queue-wait targets shed with 503; PaceQuota under a quota"},
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
	loads := []float64{0.5, 0.8, 0.95, 1.1}
	r.atLoads(s, inferenceVariants, loads, func(v *Variant, variant string, load float64) error {
		return r.inferenceOnce(v, variant, ref, capacity*load, loadgen, bodies)
	})
	if runtime.NumCPU() >= 2 && len(r.cfg.LoadGen) > 0 {
		r.inferenceUnderQuota(s, float64(runtime.NumCPU())/2, capacity, 0.8, bodies)
	}
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
		qn, qc := s.variant("naive+quota1.0@80%"), s.variant("cpuwork+quota1.0@80%")
		if qn != nil && qc != nil && qn.Valid && qc.Valid {
			ok := qc.Extra["throttled_share"] == 0 && qn.Extra["throttled_share"] > 0
			holds = holds && ok
			qp := s.variant("pool+quota1.0@80%")
			s.Verdict += fmt.Sprintf("; in a 1.0-CPU cgroup at 80%%: throttled periods cpuwork %.0f%%, naive %.0f%%, pool %.0f%% (expected 0 for cpuwork), p99 cpuwork %s, naive %s, pool %s: %s",
				100*qc.Extra["throttled_share"], 100*qn.Extra["throttled_share"], 100*qp.Extra["throttled_share"], ms(qc.medianP99()), ms(qn.medianP99()), ms(qp.medianP99()), holdsWord(ok))
		}
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
	srv, err := newInferenceServer(variant, ref, r.slots)
	if err != nil {
		return err
	}
	defer srv.close()
	return r.loadOnce(v, "inference", srv.h, rate, loadgen, bodies...)
}

// newInferenceServer builds a variant's handler: /small takes one image,
// /large largeImages; each answers 200 when every output matches the
// reference, 503 when shed, 500 otherwise.
//
// slots is the cpuwork variant's slot count; 0 (a quota case's child
// process) follows the process's own budget, with PaceQuota pacing Batch
// under a quota.
func newInferenceServer(variant string, ref *workload.Reference, slots int) (*inferenceServer, error) {
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
		watch := time.Duration(-1) // a fixed slot count: no budget following
		if slots == 0 {
			watch = 0
		}
		e, err := cpuwork.New(cpuwork.Options{Slots: slots, WatchInterval: watch, PaceQuota: true, MaxQueueWait: mqw,
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
			respond(w, run(req.Context(), class, imgs))
		}
	}
	mux := http.NewServeMux()
	mux.Handle("/small", handler(1, cpuwork.Interactive))
	mux.Handle("/large", handler(largeImages, cpuwork.Batch))
	return &inferenceServer{h: mux, close: closeFn}, nil
}

// ServeInference is the hidden `cpuwork inference-server` subcommand, the
// server of the inference scenario's quota cases: it serves variant on a
// loopback port with the slots of its own CPU budget (the cgroup it was
// started in), writes "listening ADDR" to w, and serves until stdin
// reaches EOF (the bench closes it, or dies).
func ServeInference(w io.Writer, stdin io.Reader, variant string) error {
	lib, models, err := workload.ONNXPaths()
	if err != nil {
		return err
	}
	if err := workload.InitONNX(lib); err != nil {
		return err
	}
	ref, err := workload.LoadReference(models, inferenceModel)
	if err != nil {
		return err
	}
	srv, err := newInferenceServer(variant, ref, 0)
	if err != nil {
		return err
	}
	defer srv.close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: srv.h, ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(ln)
	defer hs.Close()
	fmt.Fprintf(w, "listening %s\n", ln.Addr())
	io.Copy(io.Discard, stdin)
	return nil
}

// inferenceUnderQuota runs every variant as a child process in a cgroup
// with a quota of quota cores (below the host's CPUs) at load × its
// capacity there, and records the throttled share of CFS periods of each
// run. Needs root (it is skipped with the reason otherwise).
func (r *Runner) inferenceUnderQuota(s *Scenario, quota, capacity, load float64, bodies []string) {
	if os.Geteuid() != 0 {
		s.Notes = append(s.Notes, "quota cases not measured: creating a cgroup needs root")
		return
	}
	self := r.cfg.LoadGen[0]
	g, err := cgroup.New(cgroup.Config{Name: fmt.Sprintf("bench-inference-%d", os.Getpid()), CPUs: quota})
	if err != nil {
		s.Notes = append(s.Notes, "quota cases not measured: "+err.Error())
		return
	}
	defer g.Remove()
	rate := load * capacity * quota / float64(r.slots)
	var vs []*Variant
	for _, pv := range inferenceVariants {
		v := &Variant{Name: fmt.Sprintf("%s+quota%.1f@%.0f%%", pv.name, quota, load*100), Description: pv.desc, Valid: true}
		vs = append(vs, v)
		s.Variants = append(s.Variants, v)
	}
	for round := 0; round < r.rounds; round++ {
		for _, v := range r.shuffled(vs) {
			r.step(fmt.Sprintf("inference: %s (repeat %d/%d)", v.Name, round+1, r.rounds))
			base, _, _ := strings.Cut(v.Name, "+")
			if err := r.inferenceInGroup(v, g, self, base, rate, bodies); err != nil {
				v.Valid, v.Invalid = false, err.Error()
			}
		}
	}
	for _, v := range vs {
		if v.Valid && v.Extra["errors"] > 0 {
			v.Valid, v.Invalid = false, fmt.Sprintf("%.0f responses were errors", v.Extra["errors"])
		}
		v.Ratio = ratiosTo(v, vs[0]) // vs[0] is naive under the same quota
	}
	s.Notes = append(s.Notes, fmt.Sprintf("quota cases: each server in its own process in a %.1f-CPU cgroup (GOMAXPROCS and slots from that budget: the runtime gives max(2, ceil(quota)) Ps, the executor follows the budget with PaceQuota; ONNX Runtime's default pool still sizes to the host's %d cores), at %.0f/s = %.0f%% of the measured capacity scaled to the quota; their CPU column is the server process's", quota, runtime.NumCPU(), wholeRate(rate), load*100))
}

func (r *Runner) inferenceInGroup(v *Variant, g *cgroup.Group, self, variant string, rate float64, bodies []string) error {
	cmd, done, err := inGroup(self, g, "inference-server", "--variant", variant)
	if err != nil {
		return err
	}
	defer done()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("inference: start the server: %w", err)
	}
	defer func() { stdin.Close(); cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if err != nil || !ok {
		return fmt.Errorf("inference: the server did not start: %q %v", line, err)
	}
	before, err := g.Stat()
	if err != nil {
		return err
	}
	// The CPU that counts is the server's: its threads' on-CPU time
	// (/proc/PID/task/*/schedstat), not the bench's own.
	t0, terr := schedstat.ReadThreads(cmd.Process.Pid)
	if err := r.loadAt(v, "inference", addr, rate, r.cfg.LoadGen, bodies...); err != nil {
		return err
	}
	if t1, err := schedstat.ReadThreads(cmd.Process.Pid); terr == nil && err == nil && len(v.Repeats) > 0 {
		server := t1.Sub(t0).OnCPU.Seconds()
		rp := &v.Repeats[len(v.Repeats)-1]
		v.CPU += server - rp.CPUS
		rp.CPUS = server
	}
	after, err := g.Stat()
	if err != nil {
		return err
	}
	periods := after.Periods - before.Periods
	thr := after.ThrottledPeriods - before.ThrottledPeriods
	v.setRepeatExtra("throttled_share", float64(thr)/float64(max(periods, 1)))
	v.setExtra("throttled_periods", v.Extra["throttled_periods"]+float64(thr))
	v.setExtra("periods", v.Extra["periods"]+float64(periods))
	v.setExtra("throttled_share", v.Extra["throttled_periods"]/max(v.Extra["periods"], 1))
	return nil
}
