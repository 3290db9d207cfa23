//go:build linux

package cgroup

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Parent directories this package creates (Config.Parent, "cpuwork" by
// default) are shared by every group below them, from any process: the
// one that created a parent may exit first while others still have
// groups there. So the parents created are recorded in a registry file
// shared by every process, and the last group removed below one removes
// it; creating a group and removing a parent happen under one file lock
// (flock), so a run never creates its group in a parent another run is
// removing. A parent that existed before this package created it is never
// in the registry and never removed. The groups named by OwnedName are
// recorded in a second registry, which SweepOwned reads: a group whose
// name merely has that form is never swept.
//
// The lock and both registries live in a directory only the calling user
// can write (stateDir): a file another user can create or replace must
// never steer what root writes.

// stateBases lists where the state directory may be made, in order of
// preference, as base directory and leaf name; the first base that exists
// is used. $CPUWORK_STATE_DIR, an absolute path, replaces the list (for a
// read-only /run: a Kubernetes readOnlyRootFilesystem); it is held to the
// same checks. Tests replace it.
var stateBases = func() [][2]string {
	if x := os.Getenv(StateDirEnv); x != "" {
		x = filepath.Clean(x)
		return [][2]string{{filepath.Dir(x), filepath.Base(x)}}
	}
	uid := os.Geteuid()
	if uid == 0 {
		return [][2]string{{"/run", "cpuwork"}, {os.TempDir(), "cpuwork-0"}}
	}
	var out [][2]string
	if x := os.Getenv("XDG_RUNTIME_DIR"); strings.HasPrefix(x, "/") {
		out = append(out, [2]string{x, "cpuwork"})
	}
	return append(out, [2]string{os.TempDir(), fmt.Sprintf("cpuwork-%d", uid)})
}

// StateDirEnv names the environment variable that sets the state
// directory (the lock and the registries of the groups this package
// made) instead of /run/cpuwork for root, $XDG_RUNTIME_DIR/cpuwork or
// $TMPDIR/cpuwork-UID for another user: an absolute path whose parent
// exists. It is made with mode 0700 where missing; an existing one is
// used only when it is a real directory owned by the calling user and
// closed to everyone else.
const StateDirEnv = "CPUWORK_STATE_DIR"

// errState is wrapped when the state directory cannot be made or is not
// safe to use.
var errState = errors.New("cgroup: state directory")

// lockWait is how long withParentsLock tries the lock before it gives up
// naming the holder; lockPoll how often it tries.
var lockWait = 10 * time.Second

const lockPoll = 10 * time.Millisecond

// openStateDir opens the directory holding the lock and the registries,
// creating it (mode 0700) where missing, and returns it open: every file
// in it is then opened relative to that handle (openat, renameat), so
// what is checked is what is used, whoever renames or replaces the path
// afterwards. An existing one is used only when it is a real directory
// (not a symbolic link) owned by the calling user and closed to everyone
// else; otherwise it is refused with an error that says what is wrong,
// never replaced or worked around (another location would be one a third
// party chose).
func openStateDir() (*os.File, error) {
	uid := os.Geteuid()
	bases := stateBases()
	for _, c := range bases {
		if fi, err := os.Stat(c[0]); err != nil || !fi.IsDir() {
			continue
		}
		dir := filepath.Join(c[0], c[1])
		if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("%w: create %s: %v (a read-only %s? set %s to a directory you can write)", errState, dir, err, c[0], StateDirEnv)
		}
		fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
				fi, _ := os.Lstat(dir)
				return nil, fmt.Errorf("%w: %s is not a directory but %v: refused (remove it; cpuwork makes it again, mode 0700)", errState, dir, modeType(fi))
			}
			return nil, fmt.Errorf("%w: open %s: %v", errState, dir, err)
		}
		f := os.NewFile(uintptr(fd), dir)
		if err := checkStateDir(f, dir, uid); err != nil {
			f.Close()
			return nil, err
		}
		return f, nil
	}
	return nil, fmt.Errorf("%w: none of %v exists", errState, bases)
}

func modeType(fi fs.FileInfo) fs.FileMode {
	if fi == nil {
		return 0
	}
	return fi.Mode().Type()
}

// checkStateDir refuses the open directory f (at dir) unless it is a
// directory owned by uid and neither group- nor world-accessible.
func checkStateDir(f *os.File, dir string, uid int) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("%w: %s: %v", errState, dir, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("%w: %s is not a directory: refused (remove it; cpuwork makes it again, mode 0700)", errState, dir)
	}
	if int(st.Uid) != uid {
		return fmt.Errorf("%w: %s is owned by uid %d, not %d: refused (another user made it; remove it, cpuwork makes it again, mode 0700)", errState, dir, st.Uid, uid)
	}
	if perm := fs.FileMode(st.Mode).Perm(); perm&0o077 != 0 {
		return fmt.Errorf("%w: %s has mode %v, open to other users: refused (chmod 0700 it)", errState, dir, perm)
	}
	return nil
}

// registries is the open state directory and the files the lock
// protects in it, each a name relative to it.
type registries struct {
	dir     *os.File
	parents string // parent directories this package created
	owned   string // groups named by OwnedName, recorded by the process they name
}

// withParentsLock runs fn holding the exclusive lock of the registries.
// It returns an error, without running fn, when the state directory is
// refused, the lock cannot be opened, or another process has held it for
// lockWait (the error names it).
func withParentsLock(fn func(r registries) error) error {
	dir, err := openStateDir()
	if err != nil {
		return err
	}
	defer dir.Close()
	r := registries{dir: dir, parents: "parents", owned: "owned"}
	f, err := r.open("lock", unix.O_CREAT|unix.O_RDWR)
	if err != nil {
		return fmt.Errorf("%w: lock: %v", errState, err)
	}
	defer f.Close()
	deadline := time.Now().Add(lockWait)
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil || !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: the lock %s has been held for over %v by %s: a run stopped while it held it? (it is released when that process ends)",
				errState, filepath.Join(dir.Name(), "lock"), lockWait, lockHolder(f))
		}
		time.Sleep(lockPoll)
	}
	if err != nil {
		return fmt.Errorf("%w: lock: %v", errState, err)
	}
	defer unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return fn(r)
}

// lockHolder names the process holding a flock on f, from /proc/locks
// ("another process" when it cannot tell).
func lockHolder(f *os.File) string {
	var st unix.Stat_t
	if unix.Fstat(int(f.Fd()), &st) != nil {
		return "another process"
	}
	b, err := os.ReadFile("/proc/locks")
	if err != nil {
		return "another process"
	}
	for _, l := range strings.Split(string(b), "\n") {
		// 1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF
		fl := strings.Fields(l)
		if len(fl) < 6 || fl[1] != "FLOCK" || !strings.HasSuffix(fl[5], fmt.Sprintf(":%d", st.Ino)) {
			continue
		}
		comm, _ := os.ReadFile("/proc/" + fl[4] + "/comm")
		if c := strings.TrimSpace(string(comm)); c != "" {
			return fmt.Sprintf("pid %s (%s)", fl[4], c)
		}
		return "pid " + fl[4]
	}
	return "another process"
}

// open opens name in the state directory, never through a symbolic link
// and never blocking (a FIFO planted there is refused, not waited on),
// and refuses anything but a regular file.
func (r registries) open(name string, flags int) (*os.File, error) {
	fd, err := unix.Openat(int(r.dir.Fd()), name, flags|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: filepath.Join(r.dir.Name(), name), Err: err}
	}
	f := os.NewFile(uintptr(fd), filepath.Join(r.dir.Name(), name))
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		f.Close()
		return nil, fmt.Errorf("%s is not a regular file: refused (remove it)", f.Name())
	}
	return f, nil
}

// maxLine bounds a registry line: a path (PATH_MAX).
const maxLine = 4096

// readList returns the absolute paths recorded in the registry file; an
// error when it cannot be read whole (then it must not be rewritten: what
// it records would be lost).
func (r registries) readList(name string) ([]string, error) {
	f, err := r.open(name, unix.O_RDONLY)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: registry: %v", errState, err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 512), maxLine+1)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); strings.HasPrefix(l, "/") {
			out = append(out, l)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: registry %s cannot be read (%v): kept as it is; remove it once no cpuwork run is left", errState, f.Name(), err)
	}
	return out, nil
}

// writeList replaces the registry file with dirs (deduplicated), through a
// new temporary file in the state directory renamed over it.
func (r registries) writeList(name string, dirs []string) error {
	slices.Sort(dirs)
	dirs = slices.Compact(dirs)
	fd := int(r.dir.Fd())
	if len(dirs) == 0 {
		if err := unix.Unlinkat(fd, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("%w: remove registry %s: %v", errState, name, err)
		}
		return nil
	}
	tmp := fmt.Sprintf("%s.%d.%d.tmp", name, os.Getpid(), time.Now().UnixNano())
	f, err := r.open(tmp, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY)
	if err != nil {
		return fmt.Errorf("%w: registry: %v", errState, err)
	}
	_, werr := f.WriteString(strings.Join(dirs, "\n") + "\n")
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		unix.Unlinkat(fd, tmp, 0)
		return fmt.Errorf("%w: write registry %s: %v", errState, name, err)
	}
	if err := unix.Renameat(fd, tmp, fd, name); err != nil {
		unix.Unlinkat(fd, tmp, 0)
		return fmt.Errorf("%w: write registry %s: %v", errState, name, err)
	}
	return nil
}

// addTo adds dirs to a registry file (the caller holds the lock).
func (r registries) addTo(name string, dirs ...string) error {
	if len(dirs) == 0 {
		return nil
	}
	list, err := r.readList(name)
	if err != nil {
		return err
	}
	return r.writeList(name, append(list, dirs...))
}

// dropFrom removes dirs from a registry file (the caller holds the lock).
func (r registries) dropFrom(name string, dirs ...string) error {
	list, err := r.readList(name)
	if err != nil {
		return err
	}
	n := len(list)
	list = slices.DeleteFunc(list, func(x string) bool { return slices.Contains(dirs, x) })
	if len(list) == n {
		return nil
	}
	return r.writeList(name, list)
}

// removeEmptyParents removes, deepest first, every directory recorded in
// the registry or in made that is an ancestor of one of below and is
// empty, dropping it from the registry (the caller holds the lock). It
// returns the directories removed. An unreadable registry is kept as it
// is: then only made's directories are removed.
func removeEmptyParents(r registries, made, below []string) ([]string, error) {
	reg, rerr := r.readList(r.parents)
	cands := slices.Concat(reg, made)
	slices.SortFunc(cands, func(a, b string) int {
		if len(a) != len(b) {
			return len(b) - len(a)
		}
		return strings.Compare(a, b)
	})
	cands = slices.Compact(cands)
	var removed []string
	for _, d := range cands {
		under := false
		for _, b := range below {
			under = under || strings.HasPrefix(b, d+"/")
		}
		if !under {
			continue
		}
		if err := os.Remove(d); err == nil || errors.Is(err, fs.ErrNotExist) {
			removed = append(removed, d)
			reg = slices.DeleteFunc(reg, func(x string) bool { return x == d })
		} // else: another group still lives there
	}
	if rerr != nil {
		return removed, rerr
	}
	return removed, r.writeList(r.parents, reg)
}
