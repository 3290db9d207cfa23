package budget

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cpuwork/cpuwork/internal/cgroupfs"
)

// ErrMalformed is wrapped by errors about a cgroup or /proc file whose text
// does not parse; the error message names the file.
var ErrMalformed = cgroupfs.ErrMalformed

// Source says which input set Budget.Cores.
type Source string

const (
	// SourceAffinity: no CPU quota below the number of CPUs in the
	// affinity mask (sched_getaffinity(2), which already reflects cpusets).
	SourceAffinity Source = "affinity"
	// SourceCgroupV1: a cgroup v1 cpu.cfs_quota_us / cpu.cfs_period_us.
	SourceCgroupV1 Source = "cgroup v1 cpu.cfs_quota_us"
	// SourceCgroupV2: a cgroup v2 cpu.max.
	SourceCgroupV2 Source = "cgroup v2 cpu.max"
	// SourceRuntime: a system without cgroups or /proc (not Linux); Cores
	// is runtime.NumCPU().
	SourceRuntime Source = "runtime"
)

// Limit is a CFS bandwidth limit found at one level of the cgroup tree.
type Limit struct {
	Dir    string        `json:"dir"`       // directory the limit was read from
	Quota  time.Duration `json:"quota_ns"`  // CPU time allowed per period, summed over CPUs
	Period time.Duration `json:"period_ns"` // enforcement period (100ms by default)
	Cores  float64       `json:"cores"`     // Quota/Period (1.25 = 1250m)
	Leaf   bool          `json:"leaf"`      // true for the process's own cgroup
}

// Budget is the CPU a process can really use, with the inputs it came from.
// All CPU amounts are float64 cores (1.25 = 1250m).
type Budget struct {
	// Cores is the effective budget: the smaller of the affinity count and
	// the tightest quota of the leaf cgroup and every ancestor visible in
	// the mount.
	Cores float64 `json:"cores"`
	// Source names the input that set Cores; SourceDir is the cgroup
	// directory for the cgroup sources.
	Source    Source `json:"source"`
	SourceDir string `json:"source_dir"`

	CgroupVersion int     `json:"cgroup_version"` // 0 (no CPU cgroup found), 1 or 2
	CgroupPath    string  `json:"cgroup_path"`    // the process's cgroup path from /proc/PID/cgroup
	CgroupDir     string  `json:"cgroup_dir"`     // its directory in the mounted hierarchy
	Limits        []Limit `json:"limits"`         // every level with a quota, leaf first
	// LeafCores is the leaf cgroup's own quota in cores, 0 if none. The Go
	// runtime reads only this one (GOROOT/src/runtime/cgroup_linux.go).
	LeafCores float64 `json:"leaf_cores"`

	Affinity   int `json:"affinity"`   // CPUs in the affinity mask (sched_getaffinity)
	NumCPU     int `json:"num_cpu"`    // runtime.NumCPU() at process start (self only)
	GOMAXPROCS int `json:"gomaxprocs"` // current runtime.GOMAXPROCS(0) (self only; 0 for another PID)
	// GOMAXPROCSEnv is the GOMAXPROCS environment variable, "" if unset
	// or unknown.
	GOMAXPROCSEnv string `json:"gomaxprocs_env"`
	// GOMAXPROCSEnvUnknown, when not empty, says why the variable could
	// not be read (another process's /proc/PID/environ, readable only by
	// its user or root): GOMAXPROCSEnv is then unknown, not unset, and
	// RuntimeGOMAXPROCS assumes it is unset.
	GOMAXPROCSEnvUnknown string `json:"gomaxprocs_env_unknown,omitempty"`
	// RuntimeGOMAXPROCS is what the Go runtime's default rule (Go >= 1.25)
	// chooses: min(Affinity, max(2, ceil(LeafCores))) with a leaf quota,
	// else Affinity; the GOMAXPROCS variable overrides it.
	RuntimeGOMAXPROCS int `json:"runtime_gomaxprocs"`

	// Shares (v1 cpu.shares, default 1024) and Weight (v2 cpu.weight,
	// default 100) are the leaf's proportional-share settings, 0 if absent.
	Shares uint64 `json:"shares"`
	Weight uint64 `json:"weight"`
	// RequestCores is the CPU request these imply under Kubernetes'
	// conversion (shares = milliCPU*1024/1000; v2 weight maps back to
	// shares per KEP-2254); 0 when they are at their defaults or absent.
	RequestCores float64 `json:"request_cores"`

	// QuotaUnknown, when not empty, says why a quota could not be read
	// (a cgroup not visible in the mount namespace, a file that could
	// not be read): Limits may then miss one, and Cores is an upper
	// bound.
	QuotaUnknown string `json:"quota_unknown,omitempty"`

	// Notes lists what could not be read and was ignored (for example a
	// cgroup not visible in the mount namespace).
	Notes []string `json:"notes"`
}

// Slots is the number of CPU-bound tasks to run at once within this budget:
// floor(Cores), at least 1, at most GOMAXPROCS when that is known.
//
// Floor rather than ceil: with 1.25 cores, running 2 CPU-bound tasks spends
// the quota in 62.5 ms of each 100 ms period and the kernel then freezes
// every thread of the cgroup for the rest of it. The 0.25 core left over
// serves the runtime, the GC and non-admitted goroutines.
func (b Budget) Slots() int {
	n := Whole(b.Cores, false)
	if b.GOMAXPROCS > 0 {
		n = min(n, b.GOMAXPROCS)
	}
	return n
}

// Warning returns a one-line explanation when the GOMAXPROCS in force (or
// the runtime's default, for another process) exceeds the budget so that
// CPU-bound goroutines can exhaust a quota and be throttled, or "" when they
// agree.
func (b Budget) Warning() string {
	procs, what := b.GOMAXPROCS, "GOMAXPROCS"
	if procs == 0 {
		procs, what = b.RuntimeGOMAXPROCS, "the Go runtime's default GOMAXPROCS"
	}
	if procs == 0 || b.Source == SourceAffinity {
		return ""
	}
	if float64(procs) > b.Cores+1e-9 {
		return fmt.Sprintf("%s is %d but the CPU quota is %.2f cores (%s): %d busy goroutines use the quota up early in each %v period and the kernel throttles the whole process for the rest of it",
			what, procs, b.Cores, b.SourceDir, procs, b.period())
	}
	return ""
}

func (b Budget) period() time.Duration {
	if l, ok := b.Limiting(); ok && l.Period > 0 {
		return l.Period
	}
	return 100 * time.Millisecond
}

// Limiting returns the CFS limit that sets Cores: the cgroup (leaf or
// ancestor) whose quota is the budget, with its period and directory, where
// cpu.stat counts the throttling that matters. ok is false when Cores does
// not come from a quota (Source is affinity or runtime).
func (b Budget) Limiting() (l Limit, ok bool) {
	if b.Source != SourceCgroupV1 && b.Source != SourceCgroupV2 {
		return Limit{}, false
	}
	for _, l := range b.Limits {
		if l.Dir == b.SourceDir {
			return l, true
		}
	}
	return Limit{Dir: b.SourceDir, Period: 100 * time.Millisecond, Cores: b.Cores}, true
}

// Whole rounds cores (float64) to a whole number of CPUs, down or up,
// at least 1. A budget within 1e-9 of a whole number counts as that number,
// so that a quota of 200 ms per 100 ms is 2 whichever way it is rounded.
// Every rounding of a budget in cpuwork (Slots, the paced executor's ceil,
// package maxprocs) goes through it.
func Whole(cores float64, up bool) int {
	var n float64
	if up {
		n = math.Ceil(cores - 1e-9)
	} else {
		n = math.Floor(cores + 1e-9)
	}
	return max(int(n), 1)
}

// Detect returns the CPU budget of the calling process. It reads
// /proc/self/cgroup, /proc/self/mountinfo and the CPU controller's files of
// the leaf cgroup and every ancestor up to the mount point, and calls
// sched_getaffinity(2). An error is returned only when a file that exists
// cannot be parsed (wrapping ErrMalformed and naming the file) or the
// affinity call fails; a host without cgroups gives a budget from the
// affinity mask.
func Detect() (Budget, error) {
	return selfDetector().detect()
}

// DetectPID returns the CPU budget of another process, read from
// /proc/PID/cgroup and /proc/PID/mountinfo. GOMAXPROCS is 0 (unknown from
// outside); GOMAXPROCSEnv is read from /proc/PID/environ where permitted.
// RuntimeGOMAXPROCS assumes the process was built with Go >= 1.25.
func DetectPID(pid int) (Budget, error) {
	if pid <= 0 {
		return Budget{}, fmt.Errorf("budget: pid %d: must be positive", pid)
	}
	if !haveProc {
		return Budget{}, fmt.Errorf("budget: pid %d: %w: another process's budget is read from Linux's /proc (GOOS %s)", pid, errors.ErrUnsupported, runtime.GOOS)
	}
	if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && procState(st) == 'Z' {
		return Budget{}, fmt.Errorf("budget: pid %d is a zombie (it has exited and waits for its parent to reap it): it runs nothing and has no CPU budget", pid)
	}
	d := &detector{
		pid:      strconv.Itoa(pid),
		affinity: func() (int, error) { return affinityOf(pid) },
		env:      func(k string) (string, error) { return environOf(pid, k) },
	}
	// A target in another mount namespace (a container seen from the
	// host) names its cgroup files in its own mounts: read them through
	// its root, /proc/PID/root, not the caller's filesystem.
	if otherMountNS(pid) {
		d.nsRoot = filepath.Join("/proc", d.pid, "root")
	}
	return d.detect()
}

// detector reads the budget from a tree rooted at root ("" for the real
// filesystem), so that tests can point it at fixture trees.
type detector struct {
	root     string
	pid      string // "self" or a decimal PID
	affinity func() (int, error)
	// nsRoot prefixes the cgroup directories found in the target's
	// mountinfo when the target is in another mount namespace
	// ("/proc/PID/root"); "" otherwise.
	nsRoot     string
	numCPU     int
	gomaxprocs int
	env        func(string) (string, error)
	// readFile replaces os.ReadFile in tests.
	readFile func(string) ([]byte, error)
}

func selfDetector() *detector {
	return &detector{
		pid:        "self",
		affinity:   func() (int, error) { return affinityOf(0) },
		numCPU:     runtime.NumCPU(),
		gomaxprocs: runtime.GOMAXPROCS(0),
		env:        func(k string) (string, error) { return os.Getenv(k), nil },
	}
}

func (d *detector) read(p string) ([]byte, error) {
	if d.readFile != nil {
		return d.readFile(filepath.Join(d.root, p))
	}
	return os.ReadFile(filepath.Join(d.root, p))
}

func (d *detector) detect() (Budget, error) {
	var b Budget
	aff, err := d.affinity()
	if err != nil {
		return b, err
	}
	b.Affinity, b.NumCPU, b.GOMAXPROCS = aff, d.numCPU, d.gomaxprocs
	b.Cores, b.Source = float64(aff), SourceAffinity
	if d.env != nil {
		v, err := d.env("GOMAXPROCS")
		if err != nil {
			b.GOMAXPROCSEnvUnknown = err.Error()
		}
		b.GOMAXPROCSEnv = v
	}
	if !haveProc && d.root == "" {
		b.Source = SourceRuntime
		b.Notes = append(b.Notes, "no cgroups or affinity on "+runtime.GOOS+": the budget is runtime.NumCPU()")
	} else if err := d.readCgroup(&b); err != nil {
		return b, err
	}
	b.RuntimeGOMAXPROCS = runtimeDefault(b)
	if b.Shares != 0 && b.Shares != 1024 {
		b.RequestCores = float64(b.Shares) / 1024
	} else if b.Weight != 0 && b.Weight != 100 {
		b.RequestCores = float64(cgroupfs.WeightToShares(b.Weight)) / 1024
	}
	return b, nil
}

// runtimeDefault applies GOROOT/src/runtime/cgroup_linux.go
// (adjustCgroupGOMAXPROCS): the affinity count, lowered to
// max(2, ceil(leaf quota)) when the leaf has a quota; the GOMAXPROCS
// variable (a positive integer) overrides both.
func runtimeDefault(b Budget) int {
	// The runtime parses the variable as a positive int32 and ignores
	// anything else (runtime/proc.go, schedinit).
	if n, err := strconv.ParseInt(b.GOMAXPROCSEnv, 10, 32); err == nil && n > 0 {
		return int(n)
	}
	procs := b.Affinity
	if b.LeafCores > 0 {
		limit := max(int(math.Ceil(b.LeafCores)), 2)
		procs = min(procs, limit)
	}
	return procs
}

func (d *detector) readCgroup(b *Budget) error {
	cgPath := filepath.Join("/proc", d.pid, "cgroup")
	data, err := d.read(cgPath)
	if errors.Is(err, fs.ErrNotExist) {
		b.Notes = append(b.Notes, cgPath+" does not exist: no cgroups")
		return nil
	}
	if err != nil {
		return fmt.Errorf("budget: read %s: %w", cgPath, err)
	}
	lines, err := cgroupfs.ParseProcCgroup(data)
	if err != nil {
		return fmt.Errorf("budget: %s: %w", cgPath, err)
	}
	miPath := filepath.Join("/proc", d.pid, "mountinfo")
	data, err = d.read(miPath)
	if err != nil {
		return fmt.Errorf("budget: read %s: %w", miPath, err)
	}
	mounts, err := cgroupfs.ParseMountInfo(data)
	if err != nil {
		return fmt.Errorf("budget: %s: %w", miPath, err)
	}
	h, err := cgroupfs.FindCPU(lines, mounts)
	switch {
	case errors.Is(err, cgroupfs.ErrNoCgroup):
		b.Notes = append(b.Notes, "no CPU cgroup in "+cgPath)
		return nil
	case errors.Is(err, cgroupfs.ErrNotVisible):
		b.CgroupVersion, b.CgroupPath = h.Version, h.Path
		b.Notes = append(b.Notes, err.Error()+": quota not read")
		b.QuotaUnknown = err.Error()
		return nil
	case err != nil:
		return fmt.Errorf("budget: %w", err)
	}
	if d.nsRoot != "" {
		h.Dir, h.MountPoint = filepath.Join(d.nsRoot, h.Dir), filepath.Join(d.nsRoot, h.MountPoint)
		b.Notes = append(b.Notes, "the process is in another mount namespace: its cgroup files are read through "+d.nsRoot)
	}
	b.CgroupVersion, b.CgroupPath, b.CgroupDir = h.Version, h.Path, h.Dir
	for i, dir := range cgroupfs.Ancestors(h.Dir, h.MountPoint) {
		q, ok, err := d.readQuota(h.Version, dir)
		if errors.Is(err, cgroupfs.ErrMalformed) {
			// The Go runtime ignores a limit it cannot parse
			// (runtime/cgroup_linux.go, adjustCgroupGOMAXPROCS): so do we.
			b.Notes = append(b.Notes, err.Error()+": limit ignored, as the Go runtime ignores it")
			continue
		}
		if errors.Is(err, fs.ErrPermission) {
			// Listed but not readable (another user's cgroup seen
			// through /proc/PID/root): not "no quota".
			b.QuotaUnknown = err.Error()
			b.Notes = append(b.Notes, err.Error()+": quota unknown")
			continue
		}
		if err != nil {
			return err
		}
		if !ok || q.Unlimited {
			continue
		}
		l := Limit{Dir: dir, Quota: q.Quota, Period: q.Period, Cores: q.Cores(), Leaf: i == 0}
		b.Limits = append(b.Limits, l)
		if l.Leaf {
			b.LeafCores = l.Cores
		}
		if l.Cores < b.Cores {
			b.Cores, b.SourceDir = l.Cores, dir
			b.Source = SourceCgroupV1
			if h.Version == 2 {
				b.Source = SourceCgroupV2
			}
		}
	}
	if h.Version == 1 {
		b.Shares, err = d.readUint(filepath.Join(h.Dir, "cpu.shares"))
	} else {
		b.Weight, err = d.readUint(filepath.Join(h.Dir, "cpu.weight"))
	}
	return err
}

// readQuota reads one level's limit; ok is false when the level has no
// limit file (the v2 root, or a v2 cgroup without the cpu controller).
func (d *detector) readQuota(version int, dir string) (q cgroupfs.Quota, ok bool, err error) {
	if version == 2 {
		p := filepath.Join(dir, "cpu.max")
		data, err := d.read(p)
		if errors.Is(err, fs.ErrNotExist) {
			return q, false, nil
		}
		if err != nil {
			return q, false, fmt.Errorf("budget: read %s: %w", p, err)
		}
		q, err = cgroupfs.ParseCPUMax(data)
		if err != nil {
			return q, false, fmt.Errorf("budget: %s: %w", p, err)
		}
		return q, true, nil
	}
	qp, pp := filepath.Join(dir, "cpu.cfs_quota_us"), filepath.Join(dir, "cpu.cfs_period_us")
	qd, err := d.read(qp)
	if errors.Is(err, fs.ErrNotExist) {
		return q, false, nil
	}
	if err != nil {
		return q, false, fmt.Errorf("budget: read %s: %w", qp, err)
	}
	pd, err := d.read(pp)
	if err != nil {
		return q, false, fmt.Errorf("budget: read %s: %w", pp, err)
	}
	q, err = cgroupfs.ParseV1Quota(qd, pd)
	if err != nil {
		return q, false, fmt.Errorf("budget: %s: %w", dir, err)
	}
	return q, true, nil
}

func (d *detector) readUint(p string) (uint64, error) {
	data, err := d.read(p)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("budget: read %s: %w", p, err)
	}
	v, err := cgroupfs.ParseUint(filepath.Base(p), data)
	if err != nil {
		return 0, fmt.Errorf("budget: %s: %w", p, err)
	}
	return v, nil
}

func environOf(pid int, key string) (string, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return "", err
	}
	return parseEnviron(data, key), nil
}

// parseEnviron returns key's value in a /proc/PID/environ image
// (NUL-separated KEY=VALUE entries; the first one wins, as getenv), "" if
// absent.
func parseEnviron(data []byte, key string) string {
	for _, kv := range strings.Split(string(data), "\x00") {
		if v, ok := strings.CutPrefix(kv, key+"="); ok {
			return v
		}
	}
	return ""
}

// Stat is the CFS bandwidth accounting of a cgroup, from its cpu.stat.
type Stat struct {
	Dir              string        `json:"dir"`               // the cgroup directory read
	Periods          uint64        `json:"periods"`           // enforcement periods with runnable threads (nr_periods)
	ThrottledPeriods uint64        `json:"throttled_periods"` // periods that ran out of quota (nr_throttled)
	ThrottledTime    time.Duration `json:"throttled_ns"`      // total time throttled (v1 throttled_time ns, v2 throttled_usec)
	Usage            time.Duration `json:"usage_ns"`          // CPU time used (v2 usage_usec; 0 on v1)
}

// ReadStat reads cpu.stat of the calling process's leaf cgroup (the one
// Budget.CgroupDir names). It returns an error when the process has no
// visible CPU cgroup or the file is missing or malformed.
func ReadStat() (Stat, error) {
	b, err := Detect()
	if err != nil {
		return Stat{}, err
	}
	return ReadStatDir(b.CgroupDir)
}

// ReadStatDir reads and parses dir/cpu.stat.
func ReadStatDir(dir string) (Stat, error) {
	if dir == "" {
		return Stat{}, errors.New("budget: no visible CPU cgroup to read cpu.stat from")
	}
	p := filepath.Join(dir, "cpu.stat")
	data, err := os.ReadFile(p)
	if err != nil {
		return Stat{}, fmt.Errorf("budget: read %s: %w", p, err)
	}
	s, err := cgroupfs.ParseCPUStat(data)
	if err != nil {
		return Stat{}, fmt.Errorf("budget: %s: %w", p, err)
	}
	return Stat{Dir: dir, Periods: s.Periods, ThrottledPeriods: s.ThrottledPeriods,
		ThrottledTime: s.ThrottledTime, Usage: s.Usage}, nil
}

// Change is one report of Watch: a budget that differs from the previous
// report, or the error of a failed re-read.
type Change struct {
	Budget Budget
	Err    error
}

// DefaultWatchInterval is Watch's re-read interval when given 0. The Go
// runtime's sysmon re-reads the cgroup limit at most once per second too.
const DefaultWatchInterval = time.Second

// Watch re-reads the budget of the calling process every interval (0 means
// DefaultWatchInterval) and sends the first reading and then every change
// (Cores, Affinity, GOMAXPROCS, the limits or the cgroup). The channel holds
// at most one pending report: a slow reader sees the latest, never a stale
// one. It is closed after ctx is done.
func Watch(ctx context.Context, interval time.Duration) <-chan Change {
	return WatchFunc(ctx, interval, Detect)
}

// WatchFunc is Watch with the caller's detection function: for example
// func() (Budget, error) { return DetectPID(pid) } to follow another
// process, or a fixture in tests. It is the one budget follower of the
// module: the executor (Options.WatchInterval) and package maxprocs use it.
func WatchFunc(ctx context.Context, interval time.Duration, detect func() (Budget, error)) <-chan Change {
	if interval <= 0 {
		interval = DefaultWatchInterval
	}
	ch := make(chan Change, 1)
	go func() {
		defer close(ch)
		t := time.NewTicker(interval)
		defer t.Stop()
		var last Change
		first := true
		for {
			b, err := detect()
			c := Change{Budget: b, Err: err}
			if first || !sameChange(last, c) {
				first = false
				last = c
				select {
				case ch <- c:
				default:
					select { // replace the unread report with the latest
					case <-ch:
					default:
					}
					ch <- c
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return ch
}

func sameChange(a, b Change) bool {
	if (a.Err == nil) != (b.Err == nil) || (a.Err != nil && a.Err.Error() != b.Err.Error()) {
		return false
	}
	x, y := a.Budget, b.Budget
	return x.Cores == y.Cores && x.Affinity == y.Affinity && x.GOMAXPROCS == y.GOMAXPROCS &&
		x.CgroupDir == y.CgroupDir && slices.Equal(x.Limits, y.Limits)
}

// procState returns the state letter of a /proc/PID/stat line (field 3,
// after the command name in parentheses, which may itself contain ')'),
// or 0 when the line is malformed.
func procState(stat []byte) byte {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) || stat[i+1] != ' ' {
		return 0
	}
	return stat[i+2]
}

// otherMountNS reports whether pid's mount namespace differs from the
// caller's (the inodes of /proc/self/ns/mnt and /proc/PID/ns/mnt). An
// unreadable link (another user) counts as the same namespace.
func otherMountNS(pid int) bool {
	self, err1 := os.Stat("/proc/self/ns/mnt")
	other, err2 := os.Stat(fmt.Sprintf("/proc/%d/ns/mnt", pid))
	if err1 != nil || err2 != nil {
		return false
	}
	return !os.SameFile(self, other)
}
