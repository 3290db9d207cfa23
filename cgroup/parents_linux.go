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
	"syscall"
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
// is used. Tests replace it.
var stateBases = func() [][2]string {
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

// errState is wrapped when the state directory cannot be made or is not
// safe to use.
var errState = errors.New("cgroup: state directory")

// stateDir returns the directory holding the lock and the registries,
// creating it (mode 0700) where missing: /run/cpuwork for root,
// $XDG_RUNTIME_DIR/cpuwork or $TMPDIR/cpuwork-UID for another user. An
// existing one is used only when it is a real directory (not a symbolic
// link) owned by the calling user and closed to everyone else; otherwise
// it is refused with an error that says what is wrong, never replaced or
// worked around (another location would be one a third party chose).
func stateDir() (string, error) {
	uid := os.Geteuid()
	for _, c := range stateBases() {
		if fi, err := os.Stat(c[0]); err != nil || !fi.IsDir() {
			continue
		}
		dir := filepath.Join(c[0], c[1])
		if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("%w: create %s: %v", errState, dir, err)
		}
		return dir, checkStateDir(dir, uid)
	}
	return "", fmt.Errorf("%w: none of %v exists", errState, stateBases())
}

// checkStateDir refuses dir unless it is a directory, not a symbolic link,
// owned by uid and neither group- nor world-accessible.
func checkStateDir(dir string, uid int) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("%w: %v", errState, err)
	}
	if fi.Mode()&fs.ModeSymlink != 0 || !fi.IsDir() {
		return fmt.Errorf("%w: %s is not a directory but %v: refused (remove it; cpuwork makes it again, mode 0700)", errState, dir, fi.Mode().Type())
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%w: %s: no owner information", errState, dir)
	}
	if int(st.Uid) != uid {
		return fmt.Errorf("%w: %s is owned by uid %d, not %d: refused (another user made it; remove it, cpuwork makes it again, mode 0700)", errState, dir, st.Uid, uid)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("%w: %s has mode %v, open to other users: refused (chmod 0700 it)", errState, dir, fi.Mode().Perm())
	}
	return nil
}

// registries names the files the lock protects.
type registries struct {
	dir     string
	parents string // parent directories this package created
	owned   string // groups named by OwnedName, recorded by the process they name
}

// withParentsLock runs fn holding the exclusive lock of the registries.
// It returns an error, without running fn, when the state directory is
// refused or the lock cannot be opened.
func withParentsLock(fn func(r registries) error) error {
	dir, err := stateDir()
	if err != nil {
		return err
	}
	r := registries{dir: dir, parents: filepath.Join(dir, "parents"), owned: filepath.Join(dir, "owned")}
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("%w: open lock: %v", errState, err)
	}
	defer f.Close()
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("%w: lock: %v", errState, err)
	}
	defer syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return fn(r)
}

// readList returns the absolute paths recorded in the registry file.
func readList(file string) []string {
	f, err := os.OpenFile(file, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); strings.HasPrefix(l, "/") {
			out = append(out, l)
		}
	}
	return out
}

// writeList replaces the registry file with dirs (deduplicated), through a
// new temporary file in the state directory renamed over it.
func writeList(dir, file string, dirs []string) {
	slices.Sort(dirs)
	dirs = slices.Compact(dirs)
	if len(dirs) == 0 {
		os.Remove(file)
		return
	}
	tmp, err := os.CreateTemp(dir, filepath.Base(file)+".*.tmp")
	if err != nil {
		return
	}
	_, werr := tmp.WriteString(strings.Join(dirs, "\n") + "\n")
	if cerr := tmp.Close(); werr == nil && cerr == nil && os.Rename(tmp.Name(), file) == nil {
		return
	}
	os.Remove(tmp.Name())
}

// addTo adds dirs to a registry file (the caller holds the lock).
func addTo(dir, file string, dirs ...string) {
	if len(dirs) == 0 {
		return
	}
	writeList(dir, file, append(readList(file), dirs...))
}

// dropFrom removes dirs from a registry file (the caller holds the lock).
func dropFrom(dir, file string, dirs ...string) {
	list := readList(file)
	n := len(list)
	list = slices.DeleteFunc(list, func(x string) bool { return slices.Contains(dirs, x) })
	if len(list) != n {
		writeList(dir, file, list)
	}
}

// removeEmptyParents removes, deepest first, every directory recorded in
// the registry or in made that is an ancestor of one of below and is
// empty, dropping it from the registry (the caller holds the lock). It
// returns the directories removed.
func removeEmptyParents(r registries, made, below []string) []string {
	reg := readList(r.parents)
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
	writeList(r.dir, r.parents, reg)
	return removed
}
