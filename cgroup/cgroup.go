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
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/cpuwork/cpuwork/budget"
	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/manager"
)

// ErrPermission is wrapped when the process may not create or change
// cgroups here (not root, a read-only cgroupfs, or a hierarchy not
// delegated to this user).
var ErrPermission = errors.New("cgroup: permission denied")

// ErrUnsupported is wrapped when the host lacks what a Config asks for
// (no CPU controller, cpu.idle missing on an older kernel).
var ErrUnsupported = errors.New("cgroup: not supported here")

// Config describes a CPU cgroup to create.
type Config struct {
	// Name is the group's leaf name: letters, digits, '-', '_' and '.',
	// never a path separator or "..".
	Name string
	// Parent is the path of the parent group below the hierarchy's root;
	// "" means "cpuwork". It is created if missing and removed by Remove
	// once empty.
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
	Cpuset string
	// Idle sets cpu.idle: the group's threads are scheduled as SCHED_IDLE
	// against other groups (Linux >= 5.15).
	Idle bool
}

// Group is a cgroup created by New.
type Group struct {
	cfg     Config
	path    string // below the hierarchy root, e.g. "/cpuwork/job1"
	m       cgroups.Manager
	version int
}

// Version returns 2 on a cgroup v2 (unified) host and 1 otherwise.
func Version() int {
	if cgroups.IsCgroup2UnifiedMode() {
		return 2
	}
	return 1
}

func validName(s string) error {
	if s == "" || s == "." || s == ".." || strings.ContainsAny(s, "/\\\x00") || strings.Contains(s, "..") {
		return fmt.Errorf("cgroup: invalid name %q: must be non-empty, without path separators or \"..\"", s)
	}
	return nil
}

// New creates the group described by c and applies its limits. It returns
// an error wrapping ErrPermission or ErrUnsupported with what is missing,
// and never leaves a half-configured group behind.
func New(c Config) (*Group, error) {
	if err := validName(c.Name); err != nil {
		return nil, err
	}
	if c.Parent == "" {
		c.Parent = "cpuwork"
	}
	for _, p := range strings.Split(strings.Trim(c.Parent, "/"), "/") {
		if err := validName(p); err != nil {
			return nil, fmt.Errorf("cgroup: parent %q: %w", c.Parent, err)
		}
	}
	switch {
	case c.CPUs < 0 || math.IsNaN(c.CPUs) || math.IsInf(c.CPUs, 0):
		return nil, fmt.Errorf("cgroup: CPUs %v must be a non-negative number of cores", c.CPUs)
	case c.Period != 0 && (c.Period < time.Millisecond || c.Period > time.Second):
		return nil, fmt.Errorf("cgroup: period %v out of the kernel's range 1ms..1s", c.Period)
	case c.Weight != 0 && c.Shares != 0:
		return nil, errors.New("cgroup: set Weight or Shares, not both")
	case c.Weight > 10000:
		return nil, fmt.Errorf("cgroup: weight %d out of range 1..10000", c.Weight)
	case c.Shares != 0 && (c.Shares < 2 || c.Shares > 262144):
		return nil, fmt.Errorf("cgroup: shares %d out of range 2..262144", c.Shares)
	}
	if os.Geteuid() != 0 {
		// Delegated subtrees (systemd user slices) may still allow it; try,
		// but say why when it fails.
		if err := checkWritable(); err != nil {
			return nil, err
		}
	}
	g := &Group{cfg: c, path: "/" + strings.Trim(c.Parent, "/") + "/" + c.Name, version: Version()}
	res := &cgroups.Resources{SkipDevices: true}
	period := c.Period
	if period == 0 {
		period = 100 * time.Millisecond
	}
	if c.CPUs > 0 {
		res.CpuPeriod = uint64(period / time.Microsecond)
		res.CpuQuota = int64(math.Round(c.CPUs * float64(period/time.Microsecond)))
		if res.CpuQuota < 1000 {
			return nil, fmt.Errorf("cgroup: %v cores is a quota of %dµs per %v: the kernel's minimum is 1000µs", c.CPUs, res.CpuQuota, period)
		}
	}
	switch {
	case c.Weight != 0 && g.version == 1:
		res.CpuShares = WeightToShares(c.Weight)
	case c.Weight != 0:
		res.CpuWeight = c.Weight
	case c.Shares != 0 && g.version == 2:
		res.CpuWeight = cgroups.ConvertCPUSharesToCgroupV2Value(c.Shares)
	case c.Shares != 0:
		res.CpuShares = c.Shares
	}
	res.CpusetCpus = c.Cpuset
	if c.Idle {
		one := int64(1)
		res.CPUIdle = &one
	}
	m, err := manager.New(&cgroups.Cgroup{Path: g.path, Resources: res})
	if err != nil {
		return nil, explain("create "+g.path, err)
	}
	g.m = m
	// Apply(-1) creates the directories without moving any process.
	if err := m.Apply(-1); err != nil {
		m.Destroy()
		return nil, explain("create "+g.path, err)
	}
	if err := m.Set(res); err != nil {
		m.Destroy()
		if c.Idle && errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: cpu.idle (needs Linux >= 5.15): %v", ErrUnsupported, err)
		}
		return nil, explain("configure "+g.path, err)
	}
	return g, nil
}

func checkWritable() error {
	root := "/sys/fs/cgroup"
	if Version() == 1 {
		root = "/sys/fs/cgroup/cpu"
	}
	if unixAccessW(root) != nil {
		return fmt.Errorf("%w: not root and %s is not writable by uid %d (run as root, or in a delegated cgroup subtree)", ErrPermission, root, os.Geteuid())
	}
	return nil
}

func unixAccessW(p string) error { return syscall.Access(p, 2 /* W_OK */) }

// explain wraps a library error with what is missing.
func explain(what string, err error) error {
	switch {
	case errors.Is(err, syscall.EROFS):
		return fmt.Errorf("%w: %s: the cgroup filesystem is mounted read-only (containers usually need --cgroupns=private and a writable /sys/fs/cgroup): %v", ErrPermission, what, err)
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return fmt.Errorf("%w: %s: %v (run as root, or in a delegated subtree)", ErrPermission, what, err)
	case errors.Is(err, fs.ErrNotExist) || strings.Contains(err.Error(), "no such file"):
		return fmt.Errorf("%w: %s: a controller file is missing (on v2, the cpu and cpuset controllers must be enabled in the parent's cgroup.subtree_control): %v", ErrUnsupported, what, err)
	}
	return fmt.Errorf("cgroup: %s: %w", what, err)
}

// WeightToShares converts a cgroup v2 cpu.weight (1..10000) to v1
// cpu.shares, inverting the mapping of KEP-2254 that
// github.com/opencontainers/cgroups uses the other way.
func WeightToShares(w uint64) uint64 {
	if w == 0 {
		return 0
	}
	return 2 + (w-1)*262142/9999
}

// Path returns the group's path below the hierarchy root.
func (g *Group) Path() string { return g.path }

// Dir returns the group's directory in the CPU hierarchy.
func (g *Group) Dir() string {
	if g.version == 2 {
		return g.m.Path("")
	}
	return g.m.Path("cpu")
}

// Add moves process pid (all its threads) into the group.
func (g *Group) Add(pid int) error {
	if err := g.m.Apply(pid); err != nil {
		return explain(fmt.Sprintf("move pid %d into %s", pid, g.path), err)
	}
	return nil
}

// ProcsFile returns the CPU hierarchy's cgroup.procs of the group.
func (g *Group) ProcsFile() string { return filepath.Join(g.Dir(), "cgroup.procs") }

// ProcsFiles returns every cgroup.procs a process must write its PID to in
// order to join the group in all hierarchies (one on v2; cpu, cpuacct,
// cpuset and the others on v1), for a child that moves itself before exec.
func (g *Group) ProcsFiles() []string {
	var out []string
	seen := map[string]bool{}
	for _, p := range g.m.GetPaths() {
		f := filepath.Join(p, "cgroup.procs")
		if _, err := os.Stat(f); err != nil {
			continue // a hierarchy this group does not use (devices is skipped)
		}
		if !seen[f] {
			seen[f] = true
			out = append(out, f)
		}
	}
	return out
}

// AddThread moves one thread into the group: v1 writes it to the cpu
// hierarchy's tasks file; v2 allows it only if the group is threaded, which
// this package does not set up, so it returns ErrUnsupported there.
func (g *Group) AddThread(tid int) error {
	if g.version == 2 {
		return fmt.Errorf("%w: moving single threads needs a threaded cgroup v2 subtree", ErrUnsupported)
	}
	p := filepath.Join(g.Dir(), "tasks")
	if err := os.WriteFile(p, []byte(fmt.Sprint(tid)), 0o644); err != nil {
		return explain(fmt.Sprintf("move thread %d into %s", tid, g.path), err)
	}
	return nil
}

// Stat returns the group's CPU bandwidth counters and CPU time.
func (g *Group) Stat() (budget.Stat, error) {
	st, err := budget.ReadStatDir(g.Dir())
	if err != nil {
		return st, err
	}
	if g.version == 1 { // v1: CPU time is in the cpuacct hierarchy (nanoseconds)
		if b, err := os.ReadFile(filepath.Join(g.m.Path("cpuacct"), "cpuacct.usage")); err == nil {
			var ns int64
			if _, err := fmt.Sscan(strings.TrimSpace(string(b)), &ns); err == nil {
				st.Usage = time.Duration(ns)
			}
		}
	}
	return st, nil
}

// evictOwnThreads moves the calling process's threads that are in the
// group back to the root of each hierarchy (v1 tasks files).
func (g *Group) evictOwnThreads() {
	for _, dir := range g.m.GetPaths() {
		root := strings.TrimSuffix(dir, g.path)
		if root == dir {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, "tasks"))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if _, err := os.Stat("/proc/self/task/" + f); err == nil {
				os.WriteFile(filepath.Join(root, "tasks"), []byte(f), 0o644)
			}
		}
	}
}

// Pids returns the processes in the group, from cgroup.procs of its CPU
// hierarchy directory.
func (g *Group) Pids() ([]int, error) {
	b, err := os.ReadFile(g.ProcsFile())
	if err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		var p int
		if _, err := fmt.Sscan(f, &p); err == nil {
			pids = append(pids, p)
		}
	}
	return pids, nil
}

// Remove empties the group and removes its directories: processes left in
// it get SIGKILL, except the calling process, whose own threads (moved in
// with AddThread, for example lane threads) are moved back to the root of
// the hierarchy instead. It waits up to 5 s for the group to empty. The
// parent is removed too when this leaves it empty.
func (g *Group) Remove() error {
	self := os.Getpid()
	deadline := time.Now().Add(5 * time.Second)
	for {
		pids, err := g.Pids()
		if err != nil || len(pids) == 0 {
			break
		}
		for _, p := range pids {
			if p == self {
				g.evictOwnThreads()
				continue
			}
			syscall.Kill(p, syscall.SIGKILL)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup: %s still holds pids %v after SIGKILL", g.path, pids)
		}
		time.Sleep(10 * time.Millisecond)
	}
	var paths []string // copied: Destroy empties the manager's own map
	for _, p := range g.m.GetPaths() {
		paths = append(paths, p)
	}
	if err := g.m.Destroy(); err != nil {
		return explain("remove "+g.path, err)
	}
	// Remove the parent levels (Config.Parent) where now empty: rmdir of a
	// cgroup that still has children fails harmlessly.
	levels := len(strings.Split(strings.Trim(g.cfg.Parent, "/"), "/"))
	for _, p := range paths {
		d := p
		for range levels {
			d = filepath.Dir(d)
			if os.Remove(d) != nil {
				break
			}
		}
	}
	return nil
}
