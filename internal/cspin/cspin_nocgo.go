//go:build !cgo

package cspin

import "time"

// Spin runs a Go loop for about d of wall time (without cgo there is no
// call into C to make).
func Spin(d time.Duration) uint64 {
	x := uint64(1)
	for end := time.Now().Add(d); time.Now().Before(end); {
		for range 4096 {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	return x
}
