//go:build !cgo

package workload

import "errors"

// Built without cgo (CGO_ENABLED=0): the cgo workload is reported as
// unavailable, with the reason, wherever it is asked for.
func newZstd(*Source) (Workload, error) {
	return nil, errors.New("zstd-cgo needs cgo: this binary was built with CGO_ENABLED=0")
}
