// Package cgroup creates, configures and removes Linux control groups for
// CPU: a CFS quota and period (cores as float64), a proportional weight
// (v2 cpu.weight / v1 cpu.shares), a cpuset and cpu.idle, on cgroup v1 and
// v2 hosts.
//
// It is a thin layer over github.com/opencontainers/cgroups, the library
// runc and Kubernetes use to manage cgroups: it covers both versions with
// typed resources and statistics and few dependencies. (The alternative,
// github.com/containerd/cgroups/v3, has a stable API too but pulls in more.)
// What this package adds: names that cannot escape the hierarchy, errors
// that say exactly what is missing (not root, controller not enabled or not
// delegated, read-only cgroupfs), conversions between v1 shares and v2
// weight, throttling counters in the budget package's terms, and removal
// that empties the group first.
package cgroup

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/cpuwork/cpuwork/internal/cgroupfs"
)

// ErrPermission is wrapped when the process may not create or change
// cgroups here (not root, a read-only cgroupfs, or a hierarchy not
// delegated to this user).
var ErrPermission = errors.New("cgroup: permission denied")

// ErrUnsupported is wrapped when the host lacks what a Config asks for
// (no CPU controller, cpu.idle missing on an older kernel).
var ErrUnsupported = errors.New("cgroup: not supported here")

// ErrExist is wrapped when the group to create exists already: another
// group of that name (a second `cpuwork run --name X`), or one left behind.
// New never adopts a group it did not create.
var ErrExist = errors.New("cgroup: group exists")

// Config describes a CPU cgroup to create.
type Config struct {
	// Name is the group's leaf name: letters, digits, '-', '_' and '.',
	// never a path separator or "..".
	Name string
	// Parent is where the group goes. A relative path ("" means
	// "cpuwork") is below the calling process's own cgroup in each
	// hierarchy the group uses, as systemd-run creates scopes under its
	// slice: a command placed in the group stays inside every limit that
	// applied to its caller. A path starting with '/' is below the
	// hierarchy's root instead. Parent directories New creates are removed
	// by Remove once empty; existing ones are never removed.
	Parent string
	// CPUs is the CFS quota in cores (1.5 = 1500m = 150 ms per 100 ms);
	// 0 means no quota.
	CPUs float64
	// Period is the CFS period; 0 means 100 ms (the kernel default).
	Period time.Duration
	// Weight is cgroup v2 cpu.weight (1..10000, default 100); on v1 it is
	// converted to cpu.shares. Set Weight or Shares, not both.
	Weight uint64
	// Shares is cgroup v1 cpu.shares (2..262144, default 1024); on v2 it is
	// converted to cpu.weight.
	Shares uint64
	// Cpuset restricts the group to these CPUs ("0-1", "0,2"); "" inherits.
	// Every CPU must be online. On cgroup v1 only a non-empty Cpuset makes
	// the group join the cpuset hierarchy.
	Cpuset string
	// Idle sets cpu.idle: the group's threads are scheduled as SCHED_IDLE
	// against other groups (Linux >= 5.15).
	Idle bool
}

// Validate checks c without touching the system: the name and parent
// path, CPUs (finite, >= 0, a quota of at least the kernel's 1000 µs per
// period and at most its largest, about 2^44 µs), the period (1 ms..1 s),
// Weight or Shares in range, and the syntax of Cpuset. New calls it first;
// whether the Cpuset's CPUs are online is New's to check.
func (c Config) Validate() error {
	if err := validName(c.Name); err != nil {
		return err
	}
	parent := c.Parent
	if parent == "" {
		parent = "cpuwork"
	}
	for _, p := range strings.Split(strings.Trim(parent, "/"), "/") {
		if err := validName(p); err != nil {
			return fmt.Errorf("cgroup: parent %q: %w", c.Parent, err)
		}
	}
	period := c.Period
	if period == 0 {
		period = 100 * time.Millisecond
	}
	switch {
	case c.CPUs < 0 || math.IsNaN(c.CPUs) || math.IsInf(c.CPUs, 0):
		return fmt.Errorf("cgroup: CPUs %v must be a non-negative number of cores", c.CPUs)
	case c.Period != 0 && (c.Period < time.Millisecond || c.Period > time.Second):
		return fmt.Errorf("cgroup: period %v out of the kernel's range 1ms..1s", c.Period)
	case c.Weight != 0 && c.Shares != 0:
		return errors.New("cgroup: set Weight or Shares, not both")
	case c.Weight > 10000:
		return fmt.Errorf("cgroup: weight %d out of range 1..10000", c.Weight)
	case c.Shares != 0 && (c.Shares < 2 || c.Shares > 262144):
		return fmt.Errorf("cgroup: shares %d out of range 2..262144", c.Shares)
	}
	if c.CPUs > 0 {
		// kernel/sched/core.c: quota >= 1 ms (min_cfs_quota_period) and
		// <= max_cfs_runtime (MAX_BW, about 2^44 µs).
		us := c.CPUs * float64(period/time.Microsecond)
		switch {
		case math.Round(us) < 1000:
			return fmt.Errorf("cgroup: %v cores is a quota of %.0fµs per %v: the kernel's minimum is 1000µs", c.CPUs, math.Round(us), period)
		case us > 1<<44:
			return fmt.Errorf("cgroup: %v cores is a quota of %.3gµs per %v: above the kernel's maximum of 2^44µs", c.CPUs, us, period)
		}
	}
	if c.Cpuset != "" {
		if _, err := parseCPUList(c.Cpuset); err != nil {
			return err
		}
	}
	return nil
}

// maxCPUs bounds a CPU list: the kernel's largest NR_CPUS (CONFIG_NR_CPUS
// is at most 8192 on x86-64).
const maxCPUs = 8192

// parseCPUList parses a kernel CPU list ("0-3,6").
func parseCPUList(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(strings.TrimSpace(s), ",") {
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("cgroup: CPU list %q: %q is not a CPU number", s, lo)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("cgroup: CPU list %q: bad range %q", s, part)
			}
		}
		if b >= maxCPUs || len(out)+b-a >= maxCPUs {
			return nil, fmt.Errorf("cgroup: CPU list %q: more than %d CPUs, or a CPU number above it (the kernel's NR_CPUS limit)", s, maxCPUs)
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("cgroup: CPU list %q is empty", s)
	}
	return out, nil
}

func validName(s string) error {
	if s == "" || s == "." || s == ".." || strings.ContainsAny(s, "/\\\x00") || strings.Contains(s, "..") {
		return fmt.Errorf("cgroup: invalid name %q: must be non-empty, without path separators or \"..\"", s)
	}
	return nil
}

// WeightToShares converts a cgroup v2 cpu.weight (1..10000) to v1
// cpu.shares, inverting the mapping of KEP-2254 that
// github.com/opencontainers/cgroups uses the other way; 0 stays 0.
func WeightToShares(w uint64) uint64 { return cgroupfs.WeightToShares(w) }
