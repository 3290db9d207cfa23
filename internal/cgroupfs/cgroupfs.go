// Package cgroupfs parses the Linux files that describe a process's control
// groups: /proc/PID/cgroup, /proc/PID/mountinfo, and the CPU controller's
// interface files (cgroup v2 cpu.max, cpu.weight, cpu.stat; cgroup v1
// cpu.cfs_quota_us, cpu.cfs_period_us, cpu.shares, cpu.stat).
//
// Every parser takes the file's text and returns a typed value or an error
// wrapping ErrMalformed; none panics on any input (each has a fuzz test).
// Path resolution follows the rules of the Go runtime's own reader
// (GOROOT/src/internal/runtime/cgroup/cgroup.go): a v1 hierarchy whose
// controller list holds "cpu" wins over the v2 hierarchy (ID 0), a mount
// matches when its root is a path prefix of the cgroup path, and a path that
// leaves the cgroup namespace ("/..") cannot be reached through that mount.
//
// Formats: man 7 cgroups, man 5 proc (mountinfo),
// Documentation/admin-guide/cgroup-v2.rst and
// Documentation/scheduler/sched-bwc.rst in the kernel tree.
package cgroupfs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math"
	"path"
	"strconv"
	"strings"
	"time"
)

// ErrMalformed is wrapped by every parse error.
var ErrMalformed = errors.New("malformed")

// ErrNotVisible means the process's cgroup cannot be reached through any
// mount of its hierarchy (for example a cgroup outside the reader's cgroup
// namespace, shown as "/../..." in /proc/PID/cgroup).
var ErrNotVisible = errors.New("cgroup not visible through any mount")

// ErrNoCgroup means /proc/PID/cgroup names no CPU hierarchy.
var ErrNoCgroup = errors.New("no cpu cgroup")

func malformed(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, a...)...)
}

// CgroupLine is one line of /proc/PID/cgroup:
// "hierarchy-ID:controller-list:cgroup-path".
type CgroupLine struct {
	ID          int
	Controllers []string // empty for cgroup v2 (ID 0)
	Path        string   // absolute within the hierarchy, may start with "/.."
}

// ParseProcCgroup parses the text of /proc/PID/cgroup.
func ParseProcCgroup(data []byte) ([]CgroupLine, error) {
	var out []CgroupLine
	err := eachLine(data, 4096, 1<<20, func(n int, line string) error {
		id, rest, ok := strings.Cut(line, ":")
		if !ok {
			return malformed("line %d: no hierarchy ID separator: %q", n, line)
		}
		ctrl, p, ok := strings.Cut(rest, ":")
		if !ok {
			return malformed("line %d: no controller list separator: %q", n, line)
		}
		hid, err := strconv.Atoi(id)
		if err != nil || hid < 0 {
			return malformed("line %d: hierarchy ID %q is not a non-negative integer", n, id)
		}
		if p == "" || p[0] != '/' {
			return malformed("line %d: cgroup path %q is not absolute", n, p)
		}
		cl := CgroupLine{ID: hid, Path: p}
		if ctrl != "" {
			cl.Controllers = strings.Split(ctrl, ",")
		}
		out = append(out, cl)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// eachLine calls fn with each non-empty line of data and its number,
// from 1, reading lines of up to max bytes (a buffer of start bytes at
// first); the first error fn returns ends it, and a line over max is
// ErrMalformed.
func eachLine(data []byte, start, max int, fn func(n int, line string) error) error {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, start), max)
	n := 0
	for sc.Scan() {
		n++
		if line := sc.Text(); line != "" {
			if err := fn(n, line); err != nil {
				return err
			}
		}
	}
	if err := sc.Err(); err != nil {
		return malformed("%v", err)
	}
	return nil
}

// Mount is the part of one /proc/PID/mountinfo line that cgroup resolution
// needs. Root and MountPoint are unescaped (mountinfo writes space, tab,
// newline and backslash as \040, \011, \012, \134).
type Mount struct {
	ID           int
	Root         string   // field 4: root of the mount within the filesystem
	MountPoint   string   // field 5: relative to the process's root
	FSType       string   // field 9: "cgroup" or "cgroup2" for cgroups
	SuperOptions []string // field 11: for cgroup v1, holds the controllers
}

// splitSpaces splits a mountinfo line at ' ', the only separator the kernel
// writes (fs/proc_namespace.c, show_mountinfo). Unlike strings.Fields it
// keeps '\v', '\f' and '\r', which the kernel does not escape in paths
// (GOROOT/src/internal/runtime/cgroup test case "long-escaped-path").
func splitSpaces(s string) []string {
	var out []string
	for _, f := range strings.Split(s, " ") {
		if f != "" {
			out = append(out, f)
		}
	}
	return out
}

// ParseMountInfo parses the text of /proc/PID/mountinfo. Lines that are not
// cgroup mounts are parsed only as far as their filesystem type.
func ParseMountInfo(data []byte) ([]Mount, error) {
	var out []Mount
	err := eachLine(data, 64*1024, 4<<20, func(n int, line string) error {
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			return malformed("mountinfo line %d: no \" - \" separator", n)
		}
		f := splitSpaces(pre)
		if len(f) < 6 {
			return malformed("mountinfo line %d: %d fields before the separator, want at least 6", n, len(f))
		}
		g := splitSpaces(post)
		if len(g) < 1 {
			return malformed("mountinfo line %d: no filesystem type", n)
		}
		id, err := strconv.Atoi(f[0])
		if err != nil {
			return malformed("mountinfo line %d: mount ID %q", n, f[0])
		}
		m := Mount{ID: id, FSType: g[0]}
		if m.FSType != "cgroup" && m.FSType != "cgroup2" {
			out = append(out, m)
			return nil
		}
		if m.Root, err = Unescape(f[3]); err != nil {
			return fmt.Errorf("mountinfo line %d: root: %w", n, err)
		}
		if m.MountPoint, err = Unescape(f[4]); err != nil {
			return fmt.Errorf("mountinfo line %d: mount point: %w", n, err)
		}
		if m.Root == "" || m.Root[0] != '/' {
			return malformed("mountinfo line %d: root %q is not absolute", n, m.Root)
		}
		if len(g) >= 3 {
			m.SuperOptions = strings.Split(g[2], ",")
		}
		out = append(out, m)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Unescape undoes mountinfo's octal escapes (\NNN, as written by the
// kernel's show_path/mangle in fs/proc_namespace.c).
func Unescape(s string) (string, error) {
	if !strings.Contains(s, `\`) {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			b.WriteByte(s[i])
			continue
		}
		if i+4 > len(s) {
			return "", malformed("truncated escape in %q", s)
		}
		v, err := strconv.ParseUint(s[i+1:i+4], 8, 8)
		if err != nil {
			return "", malformed("bad escape %q in %q", s[i:i+4], s)
		}
		b.WriteByte(byte(v))
		i += 3
	}
	return b.String(), nil
}

// Hierarchy is the CPU controller's hierarchy for one process.
type Hierarchy struct {
	Version    int    // 1 or 2
	Path       string // cgroup path from /proc/PID/cgroup, e.g. "/kubepods/pod1/c1"
	MountPoint string // where the hierarchy is mounted, e.g. "/sys/fs/cgroup/cpu"
	MountRoot  string // the mount's root within the hierarchy, usually "/"
	Dir        string // MountPoint joined with Path relative to MountRoot: the leaf's directory
}

// FindCPU picks the CPU hierarchy from parsed /proc/PID/cgroup lines and
// resolves its directory through the parsed mountinfo. It returns
// ErrNoCgroup when no line names a CPU hierarchy and ErrNotVisible when no
// mount reaches the cgroup.
func FindCPU(lines []CgroupLine, mounts []Mount) (Hierarchy, error) {
	return FindController(lines, mounts, "cpu")
}

// FindController is FindCPU for any v1 controller ("cpu", "cpuset"): the
// v1 hierarchy that has it, else the v2 hierarchy.
func FindController(lines []CgroupLine, mounts []Mount, controller string) (Hierarchy, error) {
	var h Hierarchy
	for _, l := range lines {
		if l.ID == 0 && h.Version == 0 {
			h = Hierarchy{Version: 2, Path: l.Path}
			continue
		}
		for _, c := range l.Controllers {
			if c == controller {
				h = Hierarchy{Version: 1, Path: l.Path}
			}
		}
		if h.Version == 1 {
			break
		}
	}
	if h.Version == 0 {
		return h, ErrNoCgroup
	}
	for _, m := range mounts {
		switch {
		case h.Version == 1 && m.FSType == "cgroup" && contains(m.SuperOptions, controller):
		case h.Version == 2 && m.FSType == "cgroup2":
		default:
			continue
		}
		if !hasPathPrefix(h.Path, m.Root) {
			continue
		}
		rel := h.Path[len(m.Root):]
		if m.Root == "/" {
			rel = h.Path
		}
		if hasPathPrefix(rel, "/..") {
			continue
		}
		h.MountPoint, h.MountRoot = m.MountPoint, m.Root
		h.Dir = path.Join(m.MountPoint, rel)
		return h, nil
	}
	return h, fmt.Errorf("%w: cgroup v%d path %q", ErrNotVisible, h.Version, h.Path)
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// hasPathPrefix reports whether prefix is p or a parent directory of p.
func hasPathPrefix(p, prefix string) bool {
	if !strings.HasPrefix(p, prefix) {
		return false
	}
	return len(p) == len(prefix) || prefix == "/" || p[len(prefix)] == '/'
}

// Ancestors returns dir and each parent directory up to and including
// mountPoint, leaf first.
func Ancestors(dir, mountPoint string) []string {
	dir, mountPoint = path.Clean(dir), path.Clean(mountPoint)
	var out []string
	for {
		out = append(out, dir)
		if dir == mountPoint || !hasPathPrefix(dir, mountPoint) {
			return out
		}
		dir = path.Dir(dir)
	}
}

// Quota is a CFS bandwidth limit: at most Quota of CPU time per Period,
// summed over all CPUs (Documentation/scheduler/sched-bwc.rst).
// Unlimited is true when the file says "max" (v2) or -1 (v1).
type Quota struct {
	Quota     time.Duration
	Period    time.Duration
	Unlimited bool
}

// Cores is Quota/Period in CPUs (1.25 = 1250m); 0 when unlimited.
func (q Quota) Cores() float64 {
	if q.Unlimited || q.Period <= 0 {
		return 0
	}
	return float64(q.Quota) / float64(q.Period)
}

// ParseCPUMax parses cgroup v2 cpu.max: "$MAX $PERIOD" in microseconds,
// $MAX may be "max".
func ParseCPUMax(data []byte) (Quota, error) {
	f := strings.Fields(string(data))
	if len(f) != 2 {
		return Quota{}, malformed("cpu.max %q: want \"$MAX $PERIOD\"", trunc(data))
	}
	period, err := parseMicros(f[1])
	if err != nil || period <= 0 {
		return Quota{}, malformed("cpu.max period %q", f[1])
	}
	if f[0] == "max" {
		return Quota{Period: period, Unlimited: true}, nil
	}
	quota, err := parseMicros(f[0])
	if err != nil || quota <= 0 {
		return Quota{}, malformed("cpu.max quota %q", f[0])
	}
	return Quota{Quota: quota, Period: period}, nil
}

// ParseV1Quota parses cgroup v1 cpu.cfs_quota_us and cpu.cfs_period_us
// (each a decimal number of microseconds; a negative quota means none).
func ParseV1Quota(quota, period []byte) (Quota, error) {
	qs := strings.TrimSpace(string(quota))
	q, err := strconv.ParseInt(qs, 10, 64)
	if err != nil {
		return Quota{}, malformed("cpu.cfs_quota_us %q", trunc(quota))
	}
	ps := strings.TrimSpace(string(period))
	p, err := parseMicros(ps)
	if err != nil || p <= 0 {
		return Quota{}, malformed("cpu.cfs_period_us %q", trunc(period))
	}
	if q < 0 {
		return Quota{Period: p, Unlimited: true}, nil
	}
	if q == 0 || q > int64(time.Duration(1<<62)/time.Microsecond) {
		return Quota{}, malformed("cpu.cfs_quota_us %q", trunc(quota))
	}
	return Quota{Quota: time.Duration(q) * time.Microsecond, Period: p}, nil
}

func parseMicros(s string) (time.Duration, error) {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, err
	}
	if v < 0 || v > int64(time.Duration(1<<62)/time.Microsecond) {
		return 0, errors.New("out of range")
	}
	return time.Duration(v) * time.Microsecond, nil
}

// ParseUint parses a file holding one unsigned decimal number (cpu.shares,
// cpu.weight).
func ParseUint(name string, data []byte) (uint64, error) {
	v, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return 0, malformed("%s %q", name, trunc(data))
	}
	return v, nil
}

// Stat is the bandwidth part of cpu.stat. v1 reports nr_periods,
// nr_throttled, throttled_time (ns); v2 reports nr_periods, nr_throttled,
// throttled_usec and usage_usec.
type Stat struct {
	Periods          uint64        // enforcement periods that had runnable threads
	ThrottledPeriods uint64        // periods in which the cgroup was throttled
	ThrottledTime    time.Duration // total time threads were throttled
	Usage            time.Duration // CPU time used (v2 usage_usec; 0 on v1)
}

// ParseCPUStat parses cpu.stat of either version. Unknown keys are ignored;
// a line that is not "key value" or a value that is not a number is an
// error.
func ParseCPUStat(data []byte) (Stat, error) {
	var s Stat
	sc := bufio.NewScanner(bytes.NewReader(data))
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		k, v, ok := strings.Cut(line, " ")
		if !ok {
			return Stat{}, malformed("cpu.stat line %d: %q is not \"key value\"", n, line)
		}
		x, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return Stat{}, malformed("cpu.stat line %d: value %q", n, v)
		}
		switch k {
		case "nr_periods":
			s.Periods = x
		case "nr_throttled":
			s.ThrottledPeriods = x
		case "throttled_time":
			s.ThrottledTime = saturated(x, time.Nanosecond)
		case "throttled_usec":
			s.ThrottledTime = saturated(x, time.Microsecond)
		case "usage_usec":
			s.Usage = saturated(x, time.Microsecond)
		}
	}
	if err := sc.Err(); err != nil {
		return Stat{}, malformed("cpu.stat: %v", err)
	}
	return s, nil
}

// saturated converts a kernel counter of unit-sized ticks to a Duration,
// clamped at the largest Duration instead of wrapping to a negative one
// (runc's tests carry "throttled_time 18446744073709551615").
func saturated(x uint64, unit time.Duration) time.Duration {
	if x > uint64(math.MaxInt64/int64(unit)) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(x) * unit
}

func trunc(b []byte) string {
	if len(b) > 64 {
		return string(b[:64]) + "..."
	}
	return string(b)
}

// WeightToShares converts a cgroup v2 cpu.weight (1..10000) to v1
// cpu.shares by inverting KEP-2254's mapping
// (weight = 1 + (shares-2)*9999/262142, the one runc, the kubelet and
// github.com/opencontainers/cgroups use); 0 (unset) stays 0.
func WeightToShares(w uint64) uint64 {
	if w == 0 {
		return 0
	}
	return 2 + (w-1)*262142/9999
}
