package bench

import (
	"os"
	"os/exec"
	"runtime"
	"strconv"

	"github.com/cpuwork/cpuwork/cgroup"
)

// pinForChildren locks the calling goroutine to its OS thread; call the
// returned func once every child it started through inGroup is reaped.
// exec-in gives each child the parent-death signal SIGKILL, which Linux
// sends when the thread that forked the child ends (prctl(2); the Go
// issue is golang/go#27505), and a Go thread ends when a goroutine locked
// to it ends: the executor's demoted workers do, so the priority
// scenario's cpuwork-demote got its load generator killed mid-run. A
// goroutine locked to its thread keeps that thread to itself.
func pinForChildren() (unpin func()) {
	runtime.LockOSThread()
	return runtime.UnlockOSThread
}

// inGroup returns a command that runs `self args...` inside g from its
// first instruction: it starts cpuwork's hidden exec-in stage with g's
// cgroup.procs files as descriptors 3.., which joins g and executes the
// command. done closes the parent's copies of the descriptors; call it
// after Start (or instead of it). GOMAXPROCS is removed from the
// environment so children get the runtime's default. The goroutine that
// starts it must be pinned (pinForChildren) until it is reaped.
func inGroup(self string, g *cgroup.Group, args ...string) (cmd *exec.Cmd, done func(), err error) {
	return inGroupRun(self, g, self, args...)
}

// inGroupRun is inGroup for another program: self's exec-in stage joins g
// and executes `prog args...`.
func inGroupRun(self string, g *cgroup.Group, prog string, args ...string) (cmd *exec.Cmd, done func(), err error) {
	files, err := g.OpenProcs()
	if err != nil {
		return nil, nil, err
	}
	a := append([]string{"exec-in", strconv.Itoa(len(files)), "--", prog}, args...)
	cmd = exec.Command(self, a...)
	cmd.ExtraFiles = files
	cmd.Env = withoutEnv(os.Environ(), "GOMAXPROCS")
	cmd.Stderr = os.Stderr
	return cmd, func() {
		for _, f := range files {
			f.Close()
		}
	}, nil
}
