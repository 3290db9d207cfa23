//go:build linux

package cgroup

import (
	"bufio"
	"errors"
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
// in the registry and never removed.

// stateDir is where the lock and the registry live: /run/lock (tmpfs,
// root), else the temporary directory (a delegated subtree's user).
func stateDir() string {
	for _, d := range []string{"/run/lock", os.TempDir()} {
		if syscall.Access(d, 2 /* W_OK */) == nil {
			return d
		}
	}
	return os.TempDir()
}

// withParentsLock runs fn holding the exclusive lock of the parents
// registry. Without a lock file (no writable directory), fn runs
// unlocked: a concurrent removal can then make a New fail with an error
// that says the parent vanished, never lose a group.
func withParentsLock(fn func(registry string) error) error {
	dir := stateDir()
	registry := filepath.Join(dir, "cpuwork-cgroup-parents")
	f, err := os.OpenFile(filepath.Join(dir, "cpuwork-cgroup.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fn(registry)
	}
	defer f.Close()
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err == nil {
		defer syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	}
	return fn(registry)
}

// readRegistry returns the parent directories recorded as created by this
// package.
func readRegistry(registry string) []string {
	f, err := os.Open(registry)
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

// writeRegistry replaces the registry with dirs (deduplicated).
func writeRegistry(registry string, dirs []string) {
	slices.Sort(dirs)
	dirs = slices.Compact(dirs)
	if len(dirs) == 0 {
		os.Remove(registry)
		return
	}
	tmp := registry + ".tmp"
	if os.WriteFile(tmp, []byte(strings.Join(dirs, "\n")+"\n"), 0o600) == nil {
		os.Rename(tmp, registry)
	}
}

// recordParents adds dirs to the registry (the caller holds the lock).
func recordParents(registry string, dirs []string) {
	if len(dirs) == 0 {
		return
	}
	writeRegistry(registry, append(readRegistry(registry), dirs...))
}

// removeEmptyParents removes, deepest first, every directory recorded in
// the registry or in made that is an ancestor of one of below and is
// empty, dropping it from the registry (the caller holds the lock). It
// returns the directories removed.
func removeEmptyParents(registry string, made, below []string) []string {
	reg := readRegistry(registry)
	cands := slices.Concat(reg, made)
	slices.SortFunc(cands, func(a, b string) int { return len(b) - len(a) })
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
	writeRegistry(registry, reg)
	return removed
}
