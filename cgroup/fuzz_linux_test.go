//go:build linux

package cgroup

import "testing"

// FuzzParseStartTime: the owner's start time from /proc/PID/stat (Linux
// only, like the sweep that reads it).
func FuzzParseStartTime(f *testing.F) {
	f.Add([]byte("1234 (cpuwork) S 1 1234 1234 0 -1 4194560 1000 0 0 0 10 5 0 0 20 0 8 0 215680 1000000 300 18446744073709551615\n"))
	f.Add([]byte("1 (a) b) c) R 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 42"))
	f.Add([]byte("1 (x)"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if v := parseStartTime(b); v < -1 {
			t.Errorf("start time %d", v)
		}
	})
}
