package workload

import (
	"errors"
	"testing"
)

// Every light model the scenario uses runs under ONNX Runtime and matches
// the onnx package's reference output; a corrupted output is refused.
func TestONNXModelsMatchTheirReferenceOutputs(t *testing.T) {
	lib, models, err := ONNXPaths()
	if errors.Is(err, ErrNoONNX) {
		t.Skipf("optional: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := InitONNX(lib); err != nil {
		if errors.Is(err, ErrNoONNX) {
			t.Skipf("optional: %v", err)
		}
		t.Fatal(err)
	}
	for _, name := range []string{"squeezenet", "shufflenet"} {
		ref, err := LoadReference(models, name)
		if err != nil {
			t.Fatal(err)
		}
		s, err := NewSession(ref, 1)
		if err != nil {
			t.Fatal(err)
		}
		out, err := s.Infer(ref.Input)
		s.Close()
		if err != nil {
			t.Fatal(err)
		}
		if err := ref.Check(out); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		out[len(out)/2] += 0.01
		if ref.Check(out) == nil {
			t.Errorf("%s: a changed output passed the check", name)
		}
	}
}

func TestParseTensorProtoReadsRawAndPackedFloats(t *testing.T) {
	// dims [2], data_type 1, raw_data = 1.0, 2.0 little-endian.
	raw := []byte{0x08, 0x02, 0x10, 0x01, 0x4a, 0x08, 0, 0, 0x80, 0x3f, 0, 0, 0, 0x40}
	got, err := parseTensorProto(raw)
	if err != nil || len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Errorf("raw: %v, %v", got, err)
	}
	// data_type 1, packed float_data = 0.5.
	packed := []byte{0x10, 0x01, 0x22, 0x04, 0, 0, 0, 0x3f}
	if got, err := parseTensorProto(packed); err != nil || len(got) != 1 || got[0] != 0.5 {
		t.Errorf("packed: %v, %v", got, err)
	}
	if _, err := parseTensorProto([]byte{0x10, 0x07, 0x22, 0x04, 0, 0, 0, 0x3f}); err == nil {
		t.Error("a non-float tensor was accepted")
	}
}
