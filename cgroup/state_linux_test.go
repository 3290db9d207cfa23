//go:build linux

package cgroup

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// plant makes link a symbolic link to target owned by nobody, as an
// unprivileged user would plant it in a world-writable directory, and
// removes it at the end of the test.
func plant(t *testing.T, link, target string) {
	t.Helper()
	if fi, err := os.Lstat(link); err == nil && fi.Mode().IsRegular() {
		os.Remove(link) // a lock file of an earlier cpuwork
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatalf("plant %s: %v", link, err)
	}
	os.Lchown(link, 65534, 65534)
	t.Cleanup(func() { os.Remove(link) })
}

// TestNoPlantedSymlinkSteersWhatRootWrites plants, in the world-writable
// directories where the lock and the parents registry once lived
// (/run/lock and the temporary directory, mode 1777), symbolic links at
// every name the package wrote there, pointing at a root-owned file and at
// a path that does not exist; then creates and removes a group whose
// parent the package creates (so the registry is written). Nothing
// outside the package's own state directory may be written or created.
func TestNoPlantedSymlinkSteersWhatRootWrites(t *testing.T) {
	need(t)
	victims := t.TempDir()
	victim := filepath.Join(victims, "victim")
	if err := os.WriteFile(victim, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	created := filepath.Join(victims, "nologin")
	for _, dir := range []string{"/run/lock", os.TempDir()} {
		if fi, err := os.Stat(dir); err != nil || fi.Mode()&os.ModeSticky == 0 {
			continue
		}
		plant(t, filepath.Join(dir, "cpuwork-cgroup-parents.tmp"), victim)
		plant(t, filepath.Join(dir, "cpuwork-cgroup-parents"), victim)
		plant(t, filepath.Join(dir, "cpuwork-cgroup.lock"), created)
	}
	g, err := New(Config{Name: name(t), Parent: testParent + "/planted"})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "precious" {
		t.Errorf("root wrote through a planted link: the victim holds %q", b)
	}
	if _, err := os.Lstat(created); err == nil {
		t.Errorf("root created %s through a planted link", created)
	}
}

// withStateBase points the state directory at base/leaf for the test.
func withStateBase(t *testing.T, base, leaf string) {
	t.Helper()
	old := stateBases
	stateBases = func() [][2]string { return [][2]string{{base, leaf}} }
	t.Cleanup(func() { stateBases = old })
}

// TestAStateDirectoryAnotherUserMadeIsRefused simulates /run/lock: a
// world-writable sticky directory in which another user made the state
// directory's name first — a link to a directory of theirs, a directory
// of theirs, or one open to everybody. New refuses each with an error
// that names the directory, writes nothing through it, and leaves no
// group behind.
func TestAStateDirectoryAnotherUserMadeIsRefused(t *testing.T) {
	need(t)
	for _, tc := range []struct {
		name string
		make func(t *testing.T, at, theirs string)
		want string
	}{
		{"link to their directory", func(t *testing.T, at, theirs string) { plant(t, at, theirs) }, "not a directory"},
		{"their directory", func(t *testing.T, at, theirs string) {
			os.Mkdir(at, 0o700)
			os.Chown(at, 65534, 65534)
		}, "owned by uid 65534"},
		{"a directory open to everybody", func(t *testing.T, at, theirs string) {
			os.Mkdir(at, 0o777)
			os.Chmod(at, 0o777)
		}, "open to other users"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			shared := t.TempDir()
			os.Chmod(shared, 0o1777)
			theirs := t.TempDir()
			os.Chown(theirs, 65534, 65534)
			os.Chmod(theirs, 0o777)
			withStateBase(t, shared, "cpuwork")
			tc.make(t, filepath.Join(shared, "cpuwork"), theirs)
			g, err := New(Config{Name: name(t), Parent: testParent + "/refused"})
			if err == nil {
				g.Remove()
				t.Fatal("New used a state directory another user controls")
			}
			if !errors.Is(err, errState) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want one about the state directory saying %q", err, tc.want)
			}
			if ents, _ := os.ReadDir(theirs); len(ents) > 0 {
				t.Errorf("wrote %v into the other user's directory", ents)
			}
			if left := leftovers(); len(left) > 0 {
				t.Errorf("left behind %v", left)
			}
		})
	}
}

// TestTheStateDirectoryIsMadePrivate: a missing state directory is made
// with mode 0700 and used.
func TestTheStateDirectoryIsMadePrivate(t *testing.T) {
	need(t)
	base := t.TempDir()
	withStateBase(t, base, "cpuwork")
	g, err := New(Config{Name: name(t), Parent: testParent + "/private"})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Remove()
	fi, err := os.Lstat(filepath.Join(base, "cpuwork"))
	if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Fatalf("state directory %v, %v; want a directory of mode 0700", fi, err)
	}
	if _, err := os.Stat(filepath.Join(base, "cpuwork", "parents")); err != nil {
		t.Errorf("the parent New created is not in the registry: %v", err)
	}
}

// TestAGroupNamedLikeAnOwnedOneIsNeverSwept: a group whose name has the
// form OwnedName makes, naming a process that does not exist, but that
// was not created by that process, is not a dead run's group: a sweep
// leaves it and the command in it alone.
func TestAGroupNamedLikeAnOwnedOneIsNeverSwept(t *testing.T) {
	need(t)
	prefix := testPrefix + "forged"
	forged := fmt.Sprintf("%s-%d-%d", prefix, 1<<22+12345, 4242) // above pid_max's default: no such process
	if !IsOwnedName(prefix, forged) || ownName(forged) {
		t.Fatalf("%s: IsOwnedName %v, ownName %v; want true, false", forged, IsOwnedName(prefix, forged), ownName(forged))
	}
	g, err := New(Config{Name: forged, Parent: testParent})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Remove()
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	defer cmd.Process.Kill()
	if err := g.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if sw := SweepOwned(testParent, prefix); len(sw) > 0 {
		t.Errorf("swept %+v: a name of the owned form, not recorded by its owner", sw)
	}
	select {
	case <-exited:
		t.Error("the sweep killed the command in a live group")
	case <-time.After(50 * time.Millisecond):
	}
	if _, err := os.Stat(g.Dir()); err != nil {
		t.Errorf("the group is gone: %v", err)
	}
}

func TestOwnedNames(t *testing.T) {
	own := OwnedName("run")
	if !ownName(own) || !IsOwnedName("run", own) || IsOwnedName("ru", own) {
		t.Errorf("%s: ownName %v IsOwnedName %v", own, ownName(own), IsOwnedName("run", own))
	}
	for _, n := range []string{"run", "run-1", "run-x-1", "run-1-x", "run--1-2", "run-01-2", "run-1-02", "-1-2", "run-0-2"} {
		if IsOwnedName("run", n) {
			t.Errorf("%q taken for an owned name", n)
		}
	}
	if !IsOwnedName("run-a", "run-a-12-34") {
		t.Error("a prefix with a dash")
	}
}
