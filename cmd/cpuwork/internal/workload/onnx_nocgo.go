//go:build !cgo

package workload

import "fmt"

// InitONNX fails: ONNX Runtime is called through cgo.
func InitONNX(lib string) error {
	return fmt.Errorf("%w: this binary was built with CGO_ENABLED=0", ErrNoONNX)
}

// Session is unavailable without cgo.
type Session struct{}

// NewSession fails without cgo.
func NewSession(ref *Reference, intraOp int) (*Session, error) { return nil, InitONNX("") }

// Infer fails without cgo.
func (s *Session) Infer(input []float32) ([]float32, error) { return nil, InitONNX("") }

// Close does nothing.
func (s *Session) Close() {}
