//go:build linux

package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cpuwork/cpuwork/budget"
	"github.com/cpuwork/cpuwork/internal/cgroupfs"
	"github.com/opencontainers/cgroups"
	cgfs "github.com/opencontainers/cgroups/fs"
	"github.com/opencontainers/cgroups/fs2"
	"golang.org/x/sys/unix"
)

// Group is a cgroup created by New. It exists in the hierarchies it
// configures only: on v1 the cpu hierarchy (with cpuacct where the two
// are mounted together) and, with a Cpuset, the cpuset hierarchy; on v2
// the unified hierarchy. A process added to it keeps its memory, pids and
// every other membership.
type Group struct {
	cfg     Config
	path    string // below the CPU hierarchy's root, e.g. "/cpuwork/job1"
	m       cgroups.Manager
	version int
	dirs    map[string]string // controller ("cpu", "cpuset"; "" on v2) -> the group's directory
	home    map[string]string // controller -> the caller's cgroup directory in that hierarchy
	created []string          // parent directories New created, deepest first
}

// Version returns 2 on a cgroup v2 (unified) host and 1 otherwise.
func Version() int {
	if cgroups.IsCgroup2UnifiedMode() {
		return 2
	}
	return 1
}

// hierarchy is where the calling process sits in one cgroup hierarchy.
type hierarchy struct {
	mount string // the hierarchy's mount point
	dir   string // the caller's cgroup directory
}

// callerHierarchy finds the calling process's cgroup for a v1 controller
// ("cpu", "cpuset") or, on v2, in the unified hierarchy.
func callerHierarchy(controller string) (hierarchy, error) {
	cg, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return hierarchy{}, fmt.Errorf("cgroup: %w", err)
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return hierarchy{}, fmt.Errorf("cgroup: %w", err)
	}
	lines, err := cgroupfs.ParseProcCgroup(cg)
	if err != nil {
		return hierarchy{}, fmt.Errorf("cgroup: /proc/self/cgroup: %w", err)
	}
	mounts, err := cgroupfs.ParseMountInfo(mi)
	if err != nil {
		return hierarchy{}, fmt.Errorf("cgroup: /proc/self/mountinfo: %w", err)
	}
	h, err := cgroupfs.FindController(lines, mounts, controller)
	if err != nil {
		return hierarchy{}, fmt.Errorf("%w: the %s hierarchy: %v", ErrUnsupported, controller, err)
	}
	return hierarchy{mount: h.MountPoint, dir: h.Dir}, nil
}

// checkCpuset checks that every CPU of list is online
// (/sys/devices/system/cpu/online), so New fails with a clear error
// instead of the kernel's "numerical result out of range".
func checkCpuset(list string) error {
	want, err := parseCPUList(list)
	if err != nil {
		return err
	}
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return nil // cannot check: let the kernel decide
	}
	online, err := parseCPUList(string(b))
	if err != nil {
		return nil
	}
	for _, c := range want {
		if !slices.Contains(online, c) {
			return fmt.Errorf("cgroup: cpuset %q: CPU %d is not online here (online: %s)", list, c, strings.TrimSpace(string(b)))
		}
	}
	return nil
}

// New creates the group described by c and applies its limits. It returns
// an error wrapping ErrExist when the group exists already, ErrPermission
// or ErrUnsupported with what is missing, and on every error leaves no
// directory it created behind.
func New(c Config) (*Group, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.Parent == "" {
		c.Parent = "cpuwork"
	}
	if c.Cpuset != "" {
		if err := checkCpuset(c.Cpuset); err != nil {
			return nil, err
		}
	}
	if os.Geteuid() != 0 {
		// Delegated subtrees (systemd user slices) may still allow it; try,
		// but say why when it fails.
		if err := checkWritable(); err != nil {
			return nil, err
		}
	}
	res := &cgroups.Resources{SkipDevices: true}
	period := c.Period
	if period == 0 {
		period = 100 * time.Millisecond
	}
	if c.CPUs > 0 {
		res.CpuPeriod = uint64(period / time.Microsecond)
		res.CpuQuota = int64(math.Round(c.CPUs * float64(period/time.Microsecond)))
	}
	g := &Group{cfg: c, version: Version(), dirs: map[string]string{}, home: map[string]string{}}
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
	controllers := []string{"cpu"}
	if g.version == 1 && c.Cpuset != "" {
		controllers = append(controllers, "cpuset")
	}
	ok := false
	defer func() {
		if !ok {
			g.removeDirs()
		}
	}()
	for _, ctl := range controllers {
		h, err := callerHierarchy(ctl)
		if err != nil {
			return nil, err
		}
		key := ctl
		if g.version == 2 {
			key = ""
		}
		base := h.dir
		if strings.HasPrefix(c.Parent, "/") {
			base = h.mount
		}
		parent := filepath.Join(base, c.Parent)
		dir := filepath.Join(parent, c.Name)
		// The parents and the group under the registry's lock: another
		// process removing an empty parent waits, or has removed it
		// before mkParents makes it again.
		err = withParentsLock(func(r registries) error {
			n := len(g.created)
			if err := g.mkParents(h.mount, parent); err != nil {
				return err
			}
			if err := r.addTo(r.parents, g.created[:len(g.created)-n]...); err != nil {
				// Unrecorded, they would be nobody's to remove: remove
				// the parents just made (deepest first) now.
				for _, d := range g.created[:len(g.created)-n] {
					os.Remove(d)
					madeParents.Delete(d)
				}
				g.created = g.created[len(g.created)-n:]
				return err
			}
			if err := os.Mkdir(dir, 0o755); err != nil {
				if errors.Is(err, fs.ErrExist) {
					return fmt.Errorf("%w: %s (another group of that name, or a leftover: New never adopts a group it did not create; remove it with rmdir once it is empty)", ErrExist, dir)
				}
				return explain("create "+dir, err)
			}
			g.dirs[key] = dir
			if ownName(c.Name) {
				return r.addTo(r.owned, dir)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		g.dirs[key], g.home[key] = dir, h.dir
		if key == "cpu" || key == "" {
			g.path = "/" + strings.TrimPrefix(strings.TrimPrefix(dir, h.mount), "/")
		}
	}
	var err error
	if g.version == 2 {
		g.m, err = fs2.NewManager(&cgroups.Cgroup{Resources: res}, g.dirs[""])
	} else {
		paths := map[string]string{"cpu": g.dirs["cpu"]}
		if d, ok := g.dirs["cpuset"]; ok {
			paths["cpuset"] = d
		}
		if fi, err := os.Stat(filepath.Join(g.dirs["cpu"], "cpuacct.usage")); err == nil && !fi.IsDir() {
			paths["cpuacct"] = g.dirs["cpu"] // cpu and cpuacct mounted together
		}
		g.m, err = cgfs.NewManager(&cgroups.Cgroup{Resources: res}, paths)
	}
	if err != nil {
		return nil, explain("manage "+g.path, err)
	}
	// Apply(-1) prepares the directories (cpuset copies its parent's CPUs
	// and memory nodes; v2 enables the controllers in the ancestors)
	// without moving any process.
	if err := g.m.Apply(-1); err != nil {
		if g.version == 2 && errors.Is(err, syscall.EBUSY) {
			return nil, fmt.Errorf("%w: create %s: cgroup v2 allows no processes in a group that delegates the cpu controller, and %s holds processes: pass a Parent starting with '/' (cpuwork run --parent /DIR), or use systemd-run --scope: %v",
				ErrUnsupported, g.path, g.home[""], err)
		}
		return nil, explain("create "+g.path, err)
	}
	if err := g.m.Set(res); err != nil {
		if c.Idle && errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: cpu.idle (needs Linux >= 5.15): %v", ErrUnsupported, err)
		}
		return nil, explain("configure "+g.path, err)
	}
	ok = true
	return g, nil
}

// mkParents creates the missing directories from the hierarchy's mount
// point down to parent, recording each one it created.
func (g *Group) mkParents(mount, parent string) error {
	rel, err := filepath.Rel(mount, parent)
	if err != nil || strings.HasPrefix(rel, "..") {
		return fmt.Errorf("cgroup: parent %s is outside the hierarchy mounted at %s", parent, mount)
	}
	d := mount
	for _, p := range strings.Split(rel, string(filepath.Separator)) {
		if p == "." || p == "" {
			continue
		}
		d = filepath.Join(d, p)
		if err := os.Mkdir(d, 0o755); err == nil {
			g.created = append([]string{d}, g.created...)
			madeParents.Store(d, struct{}{})
		} else if !errors.Is(err, fs.ErrExist) {
			return explain("create "+d, err)
		}
	}
	return nil
}

// madeParents holds the parent directories this process created (for any
// group), beside the registry shared with other processes
// (parents_linux.go).
var madeParents sync.Map // path -> struct{}

// removeDirs removes the group's directories and, where empty, every
// parent directory above them that this package created, in this process
// or another (deepest first); never one that existed before.
func (g *Group) removeDirs() {
	var below []string
	for _, d := range g.dirs {
		os.Remove(d)
		below = append(below, d)
	}
	// A registry that cannot be read is kept as it is (its error says so
	// to whoever reads it next); this process's own parents still go.
	withParentsLock(func(r registries) error {
		derr := r.dropFrom(r.owned, below...)
		var made []string
		madeParents.Range(func(k, _ any) bool { made = append(made, k.(string)); return true })
		removed, perr := removeEmptyParents(r, made, below)
		for _, d := range removed {
			madeParents.Delete(d)
		}
		return errors.Join(derr, perr)
	})
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

// Path returns the group's path below the hierarchy root.
func (g *Group) Path() string { return g.path }

// Dir returns the group's directory in the CPU hierarchy.
func (g *Group) Dir() string {
	if g.version == 2 {
		return g.dirs[""]
	}
	return g.dirs["cpu"]
}

// SetCPUs changes the group's CFS quota to cores per its period (0 means
// no quota), as New applied Config.CPUs. A quota below the kernel's least
// (1000 µs per period) is raised to it.
func (g *Group) SetCPUs(cores float64) error {
	if math.IsNaN(cores) || math.IsInf(cores, 0) || cores < 0 {
		return fmt.Errorf("cgroup: SetCPUs(%v): want a finite number of cores >= 0", cores)
	}
	period := g.cfg.Period
	if period == 0 {
		period = 100 * time.Millisecond
	}
	us := int64(period / time.Microsecond)
	quota := int64(-1)
	if cores > 0 {
		quota = max(1000, int64(math.Round(cores*float64(us))))
	}
	var file, text string
	switch {
	case g.version == 2 && quota < 0:
		file, text = "cpu.max", fmt.Sprintf("max %d", us)
	case g.version == 2:
		file, text = "cpu.max", fmt.Sprintf("%d %d", quota, us)
	default:
		file, text = "cpu.cfs_quota_us", fmt.Sprint(quota)
	}
	if err := os.WriteFile(filepath.Join(g.Dir(), file), []byte(text), 0o644); err != nil {
		return explain("set the quota of "+g.path, err)
	}
	return nil
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
// order to join the group (one per hierarchy the group uses: the unified
// one on v2; cpu, and cpuset with a Cpuset, on v1), for a child that moves
// itself before exec. Its other memberships stay as they are.
func (g *Group) ProcsFiles() []string {
	var out []string
	for _, ctl := range []string{"cpu", "cpuset", ""} {
		if d, ok := g.dirs[ctl]; ok {
			out = append(out, filepath.Join(d, "cgroup.procs"))
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
	if g.version == 1 { // v1: CPU time is cpuacct's, where mounted with cpu (nanoseconds)
		if b, err := os.ReadFile(filepath.Join(g.dirs["cpu"], "cpuacct.usage")); err == nil {
			var ns int64
			if _, err := fmt.Sscan(strings.TrimSpace(string(b)), &ns); err == nil {
				st.Usage = time.Duration(ns)
			}
		}
	}
	return st, nil
}

// evictOwnThreads moves the calling process's threads that are in the
// group back to the cgroup the caller was in when New ran (v1 tasks files).
func (g *Group) evictOwnThreads() {
	for ctl, dir := range g.dirs {
		root := g.home[ctl]
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
// with AddThread, for example lane threads) are moved back to the cgroup
// they came from instead. It waits up to 5 s for the group to empty. The
// parent directories New created are removed too where this leaves them
// empty.
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
			killIn(p, g.path)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup: %s still holds pids %v after SIGKILL", g.path, pids)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := g.m.Destroy(); err != nil {
		return explain("remove "+g.path, err)
	}
	g.removeDirs()
	return nil
}

// OwnedName returns a group name that records its owner, the calling
// process: prefix-PID-START, START being the process's start time in clock
// ticks since boot (field 22 of /proc/PID/stat), so that a PID reused later
// does not look like the owner. SweepOwned removes such groups once their
// owner is gone.
func OwnedName(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, os.Getpid(), startTime(os.Getpid()))
}

// startTime returns field 22 of /proc/PID/stat, or -1 when there is no
// such process.
func startTime(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	return parseStartTime(b)
}

// parseStartTime returns field 22 of a /proc/PID/stat line (the start time
// in clock ticks since boot), or -1 when the line is malformed.
func parseStartTime(b []byte) int64 {
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3
	if len(f) < 20 {
		return -1
	}
	v, err := strconv.ParseInt(f[19], 10, 64)
	if err != nil || v < 0 {
		return -1
	}
	return v
}

// ownName reports whether name is OwnedName(prefix) of the calling
// process for some prefix: the process it names is this one. New records
// such groups as owned; a name of that form naming another process is
// never recorded, so a sweep never takes it for a dead run's group.
func ownName(name string) bool {
	prefix, pid, start, ok := splitOwnedName(name)
	return ok && prefix != "" && pid == os.Getpid() && start == startTime(pid)
}

// splitOwnedName splits prefix-PID-START.
func splitOwnedName(name string) (prefix string, pid int, start int64, ok bool) {
	i := strings.LastIndexByte(name, '-')
	if i <= 0 {
		return "", 0, 0, false
	}
	j := strings.LastIndexByte(name[:i], '-')
	if j < 0 {
		return "", 0, 0, false
	}
	p, err1 := strconv.Atoi(name[j+1 : i])
	st, err2 := strconv.ParseInt(name[i+1:], 10, 64)
	if err1 != nil || err2 != nil || p <= 0 || st < 0 || name != fmt.Sprintf("%s-%d-%d", name[:j], p, st) {
		return "", 0, 0, false
	}
	return name[:j], p, st, true
}

// IsOwnedName reports whether name has the form OwnedName(prefix) makes.
// A command-line tool that sweeps such groups should refuse a user-chosen
// name of that form.
func IsOwnedName(prefix, name string) bool {
	p, _, _, ok := splitOwnedName(name)
	return ok && p == prefix
}

// Swept is a group SweepOwned removed: its directory, the owner it was
// recorded with (PID and start time, in clock ticks since boot), and the
// processes it killed there (descendants of a command whose owner died:
// Pdeathsig reaches the command only, never what it forked).
type Swept struct {
	Dir        string
	OwnerPID   int
	OwnerStart int64
	Killed     []int
}

// SweepOwned removes the groups named by OwnedName(prefix) under parent
// (resolved as New resolves Config.Parent, in the cpu and cpuset
// hierarchies on v1, the unified one on v2) that New recorded as created
// by the process they name, once that process is gone: it kills every
// process left in such a group (cgroup.kill on v2 where the kernel has
// it, Linux >= 5.14; else SIGKILL through a pidfd to each process that
// /proc still shows in the group, again until it is empty, for up to
// 5 s, so processes forked meanwhile die too and a reused PID is never
// signalled), removes the group, and then every parent this package
// created that the removal leaves empty. It never touches a group with a
// live owner, nor one New did not record (a name of the same form chosen
// by hand). It returns what it removed.
func SweepOwned(parent, prefix string) []Swept {
	if parent == "" {
		parent = "cpuwork"
	}
	var owned []string
	if withParentsLock(func(r registries) error {
		var err error
		owned, err = r.readList(r.owned)
		return err
	}) != nil {
		return nil
	}
	var out []Swept
	for _, ctl := range []string{"cpu", "cpuset"} {
		h, err := callerHierarchy(ctl)
		if err != nil {
			continue
		}
		base := h.dir
		if strings.HasPrefix(parent, "/") {
			base = h.mount
		}
		dir := filepath.Join(base, parent)
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		var below []string
		for _, e := range entries {
			p, pid, start, ok := splitOwnedName(e.Name())
			if !e.IsDir() || !ok || p != prefix {
				continue
			}
			d := filepath.Join(dir, e.Name())
			if !slices.Contains(owned, d) || startTime(pid) == start {
				continue // not recorded by its owner, or its owner is alive
			}
			// Claim d: take it out of the registry under the lock, so
			// that of sweeps running at once exactly one kills and
			// removes it, and reports what it killed.
			if !claim(d) {
				continue
			}
			killed := killAll(h.mount, d)
			if os.Remove(d) == nil {
				out = append(out, Swept{Dir: d, OwnerPID: pid, OwnerStart: start, Killed: killed})
				below = append(below, d)
			} else {
				withParentsLock(func(r registries) error { return r.addTo(r.owned, d) }) // a later sweep tries again
			}
		}
		if len(below) > 0 {
			withParentsLock(func(r registries) error {
				_, err := removeEmptyParents(r, nil, below)
				return err
			})
		}
		if Version() == 2 {
			break
		}
	}
	return out
}

// claim takes d out of the owned registry, under the lock; false when
// it is no longer there (another sweep claimed it) or the registry
// cannot be read or written.
func claim(d string) bool {
	claimed := false
	withParentsLock(func(r registries) error {
		list, err := r.readList(r.owned)
		if err != nil || !slices.Contains(list, d) {
			return err
		}
		if err := r.writeList(r.owned, slices.DeleteFunc(list, func(x string) bool { return x == d })); err != nil {
			return err
		}
		claimed = true
		return nil
	})
	return claimed
}

// killAll kills every process in the cgroup directory d (below the
// hierarchy mounted at mount) and waits until cgroup.procs is empty (5 s
// at most). It returns the PIDs it signalled.
func killAll(mount, d string) []int {
	var killed []int
	procs := func() []int {
		b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if err != nil {
			return nil
		}
		var pids []int
		for _, f := range strings.Fields(string(b)) {
			if p, err := strconv.Atoi(f); err == nil && p > 0 && p != os.Getpid() {
				pids = append(pids, p)
			}
		}
		return pids
	}
	pids := procs()
	if len(pids) == 0 {
		return nil
	}
	// v2: one write kills the whole group, forks in flight included.
	os.WriteFile(filepath.Join(d, "cgroup.kill"), []byte("1"), 0)
	rel := "/" + strings.TrimPrefix(strings.TrimPrefix(d, mount), "/")
	deadline := time.Now().Add(5 * time.Second)
	for len(pids) > 0 && time.Now().Before(deadline) {
		for _, p := range pids {
			if killIn(p, rel) && !slices.Contains(killed, p) {
				killed = append(killed, p)
			}
		}
		time.Sleep(10 * time.Millisecond)
		pids = procs()
	}
	slices.Sort(killed)
	return killed
}

// killIn sends SIGKILL to the process pid only while it is in the group
// at path rel (as /proc/PID/cgroup names it): through a pidfd opened
// before the check, so a PID that was reused after cgroup.procs was read
// is never signalled. Without pidfds (Linux < 5.3) it kills by PID after
// the same check.
func killIn(pid int, rel string) bool {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		if !errors.Is(err, unix.ENOSYS) {
			return false // gone
		}
		return inGroup(pid, rel) && syscall.Kill(pid, syscall.SIGKILL) == nil
	}
	defer unix.Close(fd)
	return inGroup(pid, rel) && unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0) == nil
}

// inGroup reports whether /proc/PID/cgroup puts pid in the group at rel
// in some hierarchy.
func inGroup(pid int, rel string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.SplitN(l, ":", 3); len(f) == 3 && f[2] == rel {
			return true
		}
	}
	return false
}

// OpenProcs opens the group's cgroup.procs files (ProcsFiles) for
// writing, so a child can be handed them as descriptors and join the group
// before it executes anything (cpuwork's exec-in stage). The caller closes
// them once the child has started.
func (g *Group) OpenProcs() ([]*os.File, error) {
	var out []*os.File
	for _, p := range g.ProcsFiles() {
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err != nil {
			for _, o := range out {
				o.Close()
			}
			return nil, explain("open "+p, err)
		}
		out = append(out, f)
	}
	return out, nil
}
