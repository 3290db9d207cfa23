package workload

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
)

// ONNX Runtime inference, the first field report's workload: models from
// the onnx package's backend test data (onnx/backend/test/data/light), run
// through ONNX Runtime's C API (github.com/yalue/onnxruntime_go, cgo).
//
// Where things are found:
//   - the shared library: $ONNXRUNTIME_LIB (a path), else
//     onnxruntime/capi/libonnxruntime.so* of the onnxruntime Python package;
//   - the models: onnx/backend/test/data/light of the onnx Python package;
//   - the Python packages: asked of $CPUWORK_PYTHON, else python3.
//
// The optional install (README): python3 -m venv .venv &&
// .venv/bin/pip install onnxruntime==1.30.0 onnx==1.23.1, then
// CPUWORK_PYTHON=.venv/bin/python.

// ONNXInstall is the command that installs what the inference workload
// needs, quoted in skip reasons.
const ONNXInstall = "python3 -m venv .venv && .venv/bin/pip install onnxruntime==1.30.0 onnx==1.23.1 && export CPUWORK_PYTHON=$PWD/.venv/bin/python"

// ErrNoONNX is wrapped when ONNX Runtime or the onnx models are not
// installed, or the binary has no cgo.
var ErrNoONNX = errors.New("ONNX Runtime not available")

// ONNXPaths locates the ONNX Runtime shared library and the light models.
func ONNXPaths() (lib, models string, err error) {
	py := os.Getenv("CPUWORK_PYTHON")
	if py == "" {
		py = "python3"
	}
	out, perr := exec.Command(py, "-c", "import os, onnx, onnxruntime; print(os.path.dirname(onnxruntime.__file__)); print(os.path.dirname(onnx.__file__))").Output()
	lib = os.Getenv("ONNXRUNTIME_LIB")
	if perr != nil {
		if lib == "" {
			return "", "", fmt.Errorf("%w: %s cannot import onnxruntime and onnx (%v); install them: %s", ErrNoONNX, py, perr, ONNXInstall)
		}
		return "", "", fmt.Errorf("%w: the onnx models come from the onnx Python package, which %s cannot import (%v); install it: %s", ErrNoONNX, py, perr, ONNXInstall)
	}
	dirs := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(dirs) != 2 {
		return "", "", fmt.Errorf("%w: unexpected answer from %s: %q", ErrNoONNX, py, out)
	}
	if lib == "" {
		m, _ := filepath.Glob(filepath.Join(dirs[0], "capi", "libonnxruntime.so*"))
		if len(m) == 0 {
			return "", "", fmt.Errorf("%w: no libonnxruntime.so* in %s/capi; set ONNXRUNTIME_LIB", ErrNoONNX, dirs[0])
		}
		lib = m[0]
	}
	models = filepath.Join(dirs[1], "backend", "test", "data", "light")
	if _, err := os.Stat(models); err != nil {
		return "", "", fmt.Errorf("%w: %v", ErrNoONNX, err)
	}
	return lib, models, nil
}

// Reference is a light model's test data: the deterministic input the onnx
// backend test runner generates for it and the reference output.
type Reference struct {
	Model      string  // model file
	InputShape []int64 // NCHW
	Input      []float32
	Output     []float32
	// RTol and ATol are the tolerances of onnx/backend/test/case/model.
	RTol, ATol float64
}

// LoadReference reads light_<name>.onnx's reference output and builds its
// input as generate_dummy_data(random=False) does in
// onnx/backend/test/runner: arange(n).reshape(shape) / n as float32. The
// light models here take one [1,3,224,224] float input.
func LoadReference(models, name string) (*Reference, error) {
	ref := &Reference{Model: filepath.Join(models, "light_"+name+".onnx"), InputShape: []int64{1, 3, 224, 224}, RTol: 1e-3, ATol: 1e-7}
	if name == "densenet121" {
		ref.RTol = 2e-3
	}
	b, err := os.ReadFile(filepath.Join(models, "light_"+name+"_output_0.pb"))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoONNX, err)
	}
	if ref.Output, err = parseTensorProto(b); err != nil {
		return nil, fmt.Errorf("light_%s_output_0.pb: %w", name, err)
	}
	n := 1
	for _, d := range ref.InputShape {
		n *= int(d)
	}
	ref.Input = make([]float32, n)
	for i := range ref.Input {
		// numpy: (arange(n) / n) in float64, then astype(float32).
		ref.Input[i] = float32(float64(i) / float64(n))
	}
	return ref, nil
}

// Check compares an output with the reference as numpy.testing's
// assert_allclose does: |out - ref| <= atol + rtol*|ref| everywhere.
func (r *Reference) Check(out []float32) error {
	if len(out) != len(r.Output) {
		return fmt.Errorf("output has %d values, reference %d", len(out), len(r.Output))
	}
	for i, v := range out {
		want := float64(r.Output[i])
		if d := math.Abs(float64(v) - want); d > r.ATol+r.RTol*math.Abs(want) || math.IsNaN(float64(v)) {
			return fmt.Errorf("output[%d] = %g, reference %g (rtol %g, atol %g)", i, v, want, r.RTol, r.ATol)
		}
	}
	return nil
}

// parseTensorProto reads the float values of an onnx.TensorProto (fields:
// 1 dims, 2 data_type, 4 float_data, 9 raw_data; onnx/onnx.proto).
func parseTensorProto(b []byte) ([]float32, error) {
	var floats []float32
	var raw []byte
	dataType := int64(-1)
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		b = b[n:]
		switch {
		case num == 2 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return nil, protowire.ParseError(n)
			}
			dataType, b = int64(v), b[n:]
			continue
		case num == 9 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return nil, protowire.ParseError(n)
			}
			raw, b = v, b[n:]
			continue
		case num == 4 && typ == protowire.BytesType: // packed float_data
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return nil, protowire.ParseError(n)
			}
			for i := 0; i+4 <= len(v); i += 4 {
				floats = append(floats, math.Float32frombits(binary.LittleEndian.Uint32(v[i:])))
			}
			b = b[n:]
			continue
		case num == 4 && typ == protowire.Fixed32Type:
			v, n := protowire.ConsumeFixed32(b)
			if n < 0 {
				return nil, protowire.ParseError(n)
			}
			floats, b = append(floats, math.Float32frombits(v)), b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		b = b[n:]
	}
	if dataType != 1 {
		return nil, fmt.Errorf("data_type %d: only FLOAT (1) is supported", dataType)
	}
	if raw != nil {
		if len(raw)%4 != 0 {
			return nil, fmt.Errorf("raw_data of %d bytes is not float32s", len(raw))
		}
		floats = make([]float32, len(raw)/4)
		for i := range floats {
			floats[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
	}
	if len(floats) == 0 {
		return nil, errors.New("no values")
	}
	return floats, nil
}
