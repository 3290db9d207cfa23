package cgroup

import (
	"math"
	"testing"
	"time"
)

// Fuzz targets for what reads the outside world (issue 24): /proc/PID/stat
// (the owner's start time), CPU lists (--cpuset, /sys/devices/system/cpu/
// online), and a Config from command-line flags.

func FuzzParseCPUList(f *testing.F) {
	for _, s := range []string{"0-3,6", "0", "", "1-0", "0-99999999", "3,2,1", " 0-1\n", "-1", "0-8191"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cpus, err := parseCPUList(s)
		if err != nil {
			return
		}
		if len(cpus) == 0 || len(cpus) > maxCPUs {
			t.Errorf("%q: %d CPUs", s, len(cpus))
		}
		for _, c := range cpus {
			if c < 0 || c >= maxCPUs {
				t.Errorf("%q: CPU %d", s, c)
			}
		}
	})
}

func FuzzConfigValidate(f *testing.F) {
	f.Add("job", "", 1.5, int64(0), uint64(0), uint64(0), "0-1")
	f.Add("../x", "a/../b", -1.0, int64(time.Hour), uint64(20000), uint64(1), "x")
	f.Add("j", "/abs", math.Inf(1), int64(time.Millisecond), uint64(100), uint64(1024), "")
	f.Add("j", "", 1e300, int64(0), uint64(0), uint64(0), "")
	f.Fuzz(func(t *testing.T, name, parent string, cpus float64, period int64, weight, shares uint64, cpuset string) {
		c := Config{Name: name, Parent: parent, CPUs: cpus, Period: time.Duration(period), Weight: weight, Shares: shares, Cpuset: cpuset}
		if c.Validate() != nil {
			return
		}
		p := c.Period
		if p == 0 {
			p = 100 * time.Millisecond
		}
		switch {
		case math.IsNaN(cpus) || math.IsInf(cpus, 0) || cpus < 0:
			t.Errorf("CPUs %v accepted", cpus)
		case cpus > 0 && (cpus*float64(p/time.Microsecond) < 999.5 || cpus*float64(p/time.Microsecond) > 1<<44):
			t.Errorf("quota of %v cores per %v accepted", cpus, p)
		case weight != 0 && shares != 0, weight > 10000:
			t.Errorf("weight %d shares %d accepted", weight, shares)
		case validName(name) != nil:
			t.Errorf("name %q accepted", name)
		}
	})
}
