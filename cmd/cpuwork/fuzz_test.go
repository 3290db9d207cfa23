package main

import (
	"math"
	"strings"
	"testing"
)

// FuzzRunFlags parses `cpuwork run` flags from arbitrary words and checks
// what checkRunConfig accepts: a finite, non-negative --cpus within the
// host's CPUs unless forced, and never a panic (issue 24).
func FuzzRunFlags(f *testing.F) {
	for _, s := range []string{"--cpus 1.5", "--cpus -1", "--cpus NaN", "--cpus 1e309", "--cpuset 0-1 --weight 200", "--cpuset 0-99999999",
		"--name ../x", "--parent /a/../b", "--period 1h", "--shares 1 --weight 2", "--cpus 64 --force-cpus", "--cpus 0.001"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, args string) {
		cmd, fl := runCommand()
		if err := cmd.Flags().Parse(strings.Fields(args)); err != nil {
			return
		}
		if checkRunConfig(fl.cfg, fl.forceCPUs, 2) != nil {
			return
		}
		cpus := fl.cfg.CPUs
		if math.IsNaN(cpus) || math.IsInf(cpus, 0) || cpus < 0 || (cpus > 2 && !fl.forceCPUs) {
			t.Errorf("%q: --cpus %v accepted", args, cpus)
		}
	})
}
