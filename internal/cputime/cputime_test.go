package cputime

import (
	"runtime"
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

// The thread's clock counts the thread's own spinning and not the time it
// sleeps: 20 ms of spinning add at least 15 ms, a 50 ms sleep under 5 ms.
func TestThreadCountsTheThreadsOwnWork(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before, ok := Thread()
	if !ok {
		t.Skip("no thread CPU clock on this system")
	}
	time.Sleep(50 * time.Millisecond)
	slept, _ := Thread()
	if d := slept - before; d > 5*time.Millisecond {
		t.Fatalf("a 50 ms sleep added %v of thread CPU time", d)
	}
	start := time.Now()
	for time.Since(start) < 20*time.Millisecond {
	}
	spun, _ := Thread()
	if d := spun - slept; d < 15*time.Millisecond && !testing.Short() {
		t.Logf("20 ms of wall-clock spinning added %v of thread CPU time (the host took the rest)", d)
	} else if d > time.Second {
		t.Fatalf("20 ms of spinning added %v: not nanoseconds", d)
	}
}

func BenchmarkThread(b *testing.B) {
	for b.Loop() {
		Thread()
	}
}
