package bench

import (
	"errors"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
)

// A child with the parent-death signal (as exec-in sets it) started by a
// pinned goroutine outlives goroutines that lock their threads and end
// (each ends its thread) while it runs; the start would otherwise have
// been on one of those threads' M once the starter blocked.
func TestChildrenOfAPinnedGoroutineOutliveEndingThreads(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("Pdeathsig is Linux's")
	}
	for range 5 {
		errc := make(chan error, 1)
		go func() {
			defer pinForChildren()()
			cmd := exec.Command("sleep", "5")
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			if err := cmd.Start(); err != nil {
				errc <- err
				return
			}
			var wg sync.WaitGroup
			for range 16 {
				wg.Add(1)
				go func() { runtime.LockOSThread(); wg.Done() }() // ends locked: its thread ends
			}
			wg.Wait()
			time.Sleep(50 * time.Millisecond) // a parent-death signal arrives in this time
			cmd.Process.Signal(syscall.SIGTERM)
			err := cmd.Wait()
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
					errc <- errors.New("the child got SIGKILL: the thread that started it ended")
					return
				}
			}
			errc <- nil
		}()
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
}
