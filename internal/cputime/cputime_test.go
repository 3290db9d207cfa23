package cputime

import (
	"testing"
	"time"
)

// Spinning must make the process's CPU time grow; a reader stuck at a
// constant (or a wrong unit) never sees 20 ms added within 10 s of wall time.
func TestProcessCountsThisProcessesWork(t *testing.T) {
	before, ok := Process()
	if !ok {
		t.Skip("no process CPU time on this system")
	}
	deadline := time.Now().Add(10 * time.Second)
	for x := 0; ; x++ {
		if x%1_000_000 == 0 {
			now, _ := Process()
			if now-before >= 20*time.Millisecond {
				if now-before > time.Minute {
					t.Fatalf("CPU time grew by %v: not nanoseconds", now-before)
				}
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("10 s of spinning added %v of CPU time", now-before)
			}
		}
	}
}
