//go:build !linux

package cputime

import "time"

// thread has no per-thread CPU clock read here: it reports false, as
// Thread documents.
func thread() (time.Duration, bool) { return 0, false }

func tid() int { return 0 }
