//go:build cgo

package workload

import (
	"bytes"
	"fmt"

	"github.com/DataDog/zstd"
)

// The cgo workload: zstd through the C library that DataDog/zstd bundles.
// Without cgo (CGO_ENABLED=0) zstd_nocgo.go registers a stub that says so.

type zstdWL struct{ items [][]byte }

func newZstd(src *Source) (Workload, error) {
	text, err := src.GoText()
	if err != nil {
		return nil, err
	}
	return &zstdWL{items: chunks(text, 64<<10, 64)}, nil
}

func (w *zstdWL) Name() string { return "zstd-cgo" }
func (w *zstdWL) Run(i int) error {
	in := w.items[i%len(w.items)]
	z, err := zstd.CompressLevel(nil, in, 3)
	if err != nil {
		return err
	}
	out, err := zstd.Decompress(nil, z)
	if err != nil {
		return err
	}
	if !bytes.Equal(out, in) {
		return fmt.Errorf("zstd-cgo: round trip of item %d differs", i)
	}
	return nil
}
