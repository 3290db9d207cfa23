package bench

import (
	"os"
	"os/exec"
	"strconv"

	"github.com/cpuwork/cpuwork/cgroup"
)

// inGroup returns a command that runs `self args...` inside g from its
// first instruction: it starts cpuwork's hidden exec-in stage with g's
// cgroup.procs files as descriptors 3.., which joins g and executes the
// command. done closes the parent's copies of the descriptors; call it
// after Start (or instead of it). GOMAXPROCS is removed from the
// environment so children get the runtime's default.
func inGroup(self string, g *cgroup.Group, args ...string) (cmd *exec.Cmd, done func(), err error) {
	files, err := g.OpenProcs()
	if err != nil {
		return nil, nil, err
	}
	a := append([]string{"exec-in", strconv.Itoa(len(files)), "--", self}, args...)
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
