package bench

import (
	"fmt"
	"time"
)

// The validity checks of the scenarios' measurements: each says why a run
// measured nothing it can be judged on, and each is tested failing
// (validity_test.go). A run that fails one is an error, which makes the
// variant invalid and every verdict that needs it "not judged".

// canaryValid: the timers canary sleeps to each 1 ms mark of d; a run in
// which it woke for fewer than 95 % of them did not measure the timers.
func canaryValid(woke int64, d time.Duration) error {
	if marks := int64(d / time.Millisecond); woke < marks*95/100 {
		return fmt.Errorf("timers: the canary woke for %d of %d marks", woke, marks)
	}
	return nil
}

// echoValid: every echo sent must come back.
func echoValid(got, sent int64) error {
	if sent == 0 || got < sent {
		return fmt.Errorf("timers: %d of %d echoes came back within 2 s of the run's end", got, sent)
	}
	return nil
}

// probeValid: the neighbour probe runs every 10 ms for d.
func probeValid(probes int, d time.Duration) error {
	if want := int(d / (10 * time.Millisecond)); probes < want*95/100 {
		return fmt.Errorf("neighbour: the probe ran %d of its %d intervals", probes, want)
	}
	return nil
}

// periodsValid: a run in a quota cgroup must see CFS periods in its
// cpu.stat, else the quota was not enforced or not read.
func periodsValid(periods uint64, path string) error {
	if periods == 0 {
		return fmt.Errorf("%s counted no CFS periods during the run: the quota was not enforced or cpu.stat not read", path)
	}
	return nil
}

// cpuValid: a child's CPU time must have been read.
func cpuValid(cpuS float64, what string) error {
	if cpuS <= 0 {
		return fmt.Errorf("%s: CPU time not read (cgroup usage and rusage both 0)", what)
	}
	return nil
}

// rateValid: the generator must have sent at least 99 % of the offered
// rate (achieved/offered in requests per second).
func rateValid(achieved, offered float64) error {
	if offered > 0 && achieved < 0.99*offered {
		return fmt.Errorf("load generator sent %.1f/s of %.1f/s offered", achieved, offered)
	}
	return nil
}
