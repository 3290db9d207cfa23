//go:build cgo

package workload

import (
	"fmt"
	"sync"

	ort "github.com/yalue/onnxruntime_go"
)

var ortInit struct {
	once sync.Once
	err  error
}

// InitONNX loads the ONNX Runtime shared library once per process.
func InitONNX(lib string) error {
	ortInit.once.Do(func() {
		ort.SetSharedLibraryPath(lib)
		if err := ort.InitializeEnvironment(); err != nil {
			ortInit.err = fmt.Errorf("%w: load %s: %v", ErrNoONNX, lib, err)
		}
	})
	return ortInit.err
}

// Session is an ONNX Runtime session of one model. Run is safe for
// concurrent use (InferenceSession::Run is); the session's intra-op
// thread pool is shared by concurrent runs.
type Session struct {
	s        *ort.DynamicAdvancedSession
	ref      *Reference
	in, out  string
	outShape ort.Shape
}

// NewSession opens ref's model with intraOp threads for each run's
// operators (0: ONNX Runtime's default, one per physical core, which
// ignores the container's CPU limit: microsoft/onnxruntime issue 29510).
//
// The adapter cpuwork uses for a foreign thread pool: one ONNX Runtime
// thread per slot. A session with intraOp 1 runs each inference on the
// calling thread only, so a task that holds a cpuwork slot uses exactly
// one CPU, Go and C together, and the executor's slot count (floor of the
// quota) bounds the process's CPU use. (For a request that may use k
// slots, open a session with intraOp k and run it under e.For or k held
// slots.) Measured in the bench's inference scenario (docs/bench.md,
// README): in a 1.0-CPU cgroup at 80 % of capacity, ONNX Runtime's
// default pool was throttled in 100 % of the CFS periods with p99 154 ms,
// one thread per slot (paced to the quota) in 0 % with p99 89 ms; without a
// quota the default pool's spinning threads cost 7-15 % more CPU for the
// same requests served (11.8 vs 10.2-11.0 CPU-seconds over the three
// repeats at 95 % load, in two runs).
func NewSession(ref *Reference, intraOp int) (*Session, error) {
	ins, outs, err := ort.GetInputOutputInfo(ref.Model)
	if err != nil {
		return nil, fmt.Errorf("onnx: %s: %w", ref.Model, err)
	}
	if len(ins) != 1 || len(outs) != 1 {
		return nil, fmt.Errorf("onnx: %s has %d inputs and %d outputs; want 1 and 1", ref.Model, len(ins), len(outs))
	}
	opts, err := ort.NewSessionOptions()
	if err != nil {
		return nil, err
	}
	defer opts.Destroy()
	if intraOp > 0 {
		if err := opts.SetIntraOpNumThreads(intraOp); err != nil {
			return nil, err
		}
	}
	if err := opts.SetInterOpNumThreads(1); err != nil {
		return nil, err
	}
	s, err := ort.NewDynamicAdvancedSession(ref.Model, []string{ins[0].Name}, []string{outs[0].Name}, opts)
	if err != nil {
		return nil, fmt.Errorf("onnx: %s: %w", ref.Model, err)
	}
	return &Session{s: s, ref: ref, in: ins[0].Name, out: outs[0].Name, outShape: outs[0].Dimensions}, nil
}

// Infer runs the model on one input of the reference's shape and returns
// its output.
func (s *Session) Infer(input []float32) ([]float32, error) {
	if len(input) != len(s.ref.Input) {
		return nil, fmt.Errorf("onnx: input of %d values, the model takes %d", len(input), len(s.ref.Input))
	}
	in, err := ort.NewTensor(ort.NewShape(s.ref.InputShape...), input)
	if err != nil {
		return nil, err
	}
	defer in.Destroy()
	out := []ort.Value{nil}
	if err := s.s.Run([]ort.Value{in}, out); err != nil {
		return nil, fmt.Errorf("onnx: run: %w", err)
	}
	defer out[0].Destroy()
	t, ok := out[0].(*ort.Tensor[float32])
	if !ok {
		return nil, fmt.Errorf("onnx: output is %T, want a float32 tensor", out[0])
	}
	return append([]float32(nil), t.GetData()...), nil
}

// Close frees the session.
func (s *Session) Close() { s.s.Destroy() }
