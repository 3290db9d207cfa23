//go:build !unix && !windows

package cputime

import "time"

// process has no source of the process's CPU time here (js/wasm, wasip1,
// plan9): it reports false, as Process documents.
func process() (time.Duration, bool) { return 0, false }
