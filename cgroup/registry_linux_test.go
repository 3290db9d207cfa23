//go:build linux

package cgroup

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// privateState points the state directory at a fresh private one.
func privateState(t *testing.T) string {
	t.Helper()
	base := t.TempDir()
	withStateBase(t, base, "cpuwork")
	return filepath.Join(base, "cpuwork")
}

// newWithin returns New's error for a group under parent (removing the
// group if New made it), failing the test if New blocks for 10 s; unblock
// then lets it go on.
func newWithin(t *testing.T, parent string, unblock func()) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		g, err := New(Config{Name: name(t), Parent: parent})
		if err == nil {
			g.Remove()
		}
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		unblock()
		<-done
		t.Fatal("New blocked for 10 s")
		return nil
	}
}

// The lock has a deadline: held by another open file description (a run
// stopped inside the locked section), New gives up after lockWait with
// an error naming the holder instead of blocking every later run.
func TestAHeldLockIsGivenUpOnNamingItsHolder(t *testing.T) {
	need(t)
	dir := privateState(t)
	old := lockWait
	lockWait = 200 * time.Millisecond
	t.Cleanup(func() { lockWait = old })
	os.MkdirAll(dir, 0o700)
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	err = newWithin(t, testParent+"/held", func() { syscall.Flock(int(f.Fd()), syscall.LOCK_UN) })
	if err == nil || !strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) {
		t.Errorf("New with the lock held: %v; want an error naming pid %d", err, os.Getpid())
	}
}

// A FIFO where a registry should be is refused at once, not waited on,
// and left as it is.
func TestAFIFOForARegistryIsRefusedNotWaitedOn(t *testing.T) {
	need(t)
	dir := privateState(t)
	os.MkdirAll(dir, 0o700)
	if err := syscall.Mkfifo(filepath.Join(dir, "parents"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := newWithin(t, testParent+"/fifo/below", func() {
		os.OpenFile(filepath.Join(dir, "parents"), os.O_WRONLY|syscall.O_NONBLOCK, 0)
	})
	if err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("New with a FIFO for the parents registry: %v; want it refused", err)
	}
	if fi, err := os.Lstat(filepath.Join(dir, "parents")); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("the FIFO was replaced: %v %v", fi, err)
	}
	if left := leftovers(); len(left) > 0 {
		t.Errorf("left behind %v", left)
	}
}

// A registry that cannot be read whole (a line over the scanner's bound)
// is kept as it is, with an error, never rewritten without what it held.
func TestAnUnreadableRegistryIsKeptNotOverwritten(t *testing.T) {
	need(t)
	dir := privateState(t)
	os.MkdirAll(dir, 0o700)
	body := "/sys/fs/cgroup/cpu/kept-a\n/" + strings.Repeat("x", 70<<10) + "\n/sys/fs/cgroup/cpu/kept-b\n"
	reg := filepath.Join(dir, "parents")
	if err := os.WriteFile(reg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	g, err := New(Config{Name: name(t), Parent: testParent + "/unreadable/below"})
	if err == nil {
		g.Remove()
		t.Error("New recorded its parents in a registry it could not read")
	} else if !strings.Contains(err.Error(), "cannot be read") {
		t.Errorf("New: %v; want an error saying the registry cannot be read", err)
	}
	if b, _ := os.ReadFile(reg); string(b) != body {
		t.Errorf("the registry was rewritten: %d bytes, was %d", len(b), len(body))
	}
	if left := leftovers(); len(left) > 0 {
		t.Errorf("left behind %v", left)
	}
}

// $CPUWORK_STATE_DIR sets the state directory (a read-only /run), held to
// the same checks: made private where missing, refused when open to
// other users.
func TestTheStateDirectoryCanBeSet(t *testing.T) {
	need(t)
	old := stateBases
	t.Cleanup(func() { stateBases = old })
	stateBases = old
	dir := filepath.Join(t.TempDir(), "state")
	t.Setenv(StateDirEnv, dir)
	g, err := New(Config{Name: name(t), Parent: testParent + "/set/below"})
	if err != nil {
		t.Fatal(err)
	}
	g.Remove()
	if fi, err := os.Lstat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("%s: %v %v; want it made with mode 0700", dir, fi, err)
	}
	os.Chmod(dir, 0o777)
	if g, err := New(Config{Name: name(t), Parent: testParent + "/set/below"}); err == nil {
		g.Remove()
		t.Error("a state directory open to other users was used")
	}
}

// Sweeps running at once report each dead run's group once, with the
// processes killed there: exactly one sweep claims it.
func TestConcurrentSweepsReportEachGroupOnce(t *testing.T) {
	need(t)
	privateState(t)
	prefix := testPrefix + "sweep"
	for round := range 5 {
		dead := fmt.Sprintf("%s-%d-%d", prefix, 1<<22+round, 4242) // no such process
		g, err := New(Config{Name: dead, Parent: testParent})
		if err != nil {
			t.Fatal(err)
		}
		if err := withParentsLock(func(r registries) error { return r.addTo(r.owned, g.Dir()) }); err != nil {
			t.Fatal(err)
		}
		cmd := sleepIn(t, g)
		var mu sync.Mutex
		var reports []Swept
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				sw := SweepOwned(testParent, prefix)
				mu.Lock()
				reports = append(reports, sw...)
				mu.Unlock()
			})
		}
		wg.Wait()
		if len(reports) != 1 || len(reports[0].Killed) != 1 || reports[0].Killed[0] != cmd.Process.Pid {
			t.Fatalf("round %d: four sweeps reported %+v; want the group once, with pid %d killed", round, reports, cmd.Process.Pid)
		}
	}
}
