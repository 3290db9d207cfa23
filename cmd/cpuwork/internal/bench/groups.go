package bench

import (
	"errors"
	"fmt"
	"sync"

	"github.com/cpuwork/cpuwork/cgroup"
)

// groupPrefixes name every cgroup the bench creates: each is named
// cgroup.OwnedName(prefix) (prefix-PID-START), so that SweepStale, at the
// start of a later run, can tell the groups of a bench that died.
var groupPrefixes = []string{"bench-quota", "bench-loadgen", "bench-inference", "bench-probe", "bench-hog", "bench-fleet0", "bench-fleet1", "bench-fleet2", "compete"}

// live holds the groups this process created and has not removed yet, for
// Cleanup on SIGINT/SIGTERM.
var live struct {
	sync.Mutex
	groups  map[*cgroup.Group]bool
	closing bool // Cleanup ran: no new groups
}

// errInterrupted is newGroup's error once Cleanup has run.
var errInterrupted = errors.New("bench: interrupted, no new cgroups")

// newGroup creates a cgroup for the bench (c.Name is set from prefix, one
// of groupPrefixes) and tracks it until removeGroup. Creating and tracking
// happen under one lock with Cleanup, so a scenario that goes on while the
// signal handler cleans up cannot leave a group behind.
func newGroup(prefix string, c cgroup.Config) (*cgroup.Group, error) {
	c.Name = cgroup.OwnedName(prefix)
	live.Lock()
	defer live.Unlock()
	if live.closing {
		return nil, errInterrupted
	}
	g, err := cgroup.New(c)
	if err != nil {
		return nil, err
	}
	if live.groups == nil {
		live.groups = map[*cgroup.Group]bool{}
	}
	live.groups[g] = true
	return g, nil
}

// removeGroup kills what is left in g, removes it and stops tracking it.
func removeGroup(g *cgroup.Group) error {
	live.Lock()
	delete(live.groups, g)
	live.Unlock()
	return g.Remove()
}

// Cleanup removes every cgroup the bench created and has not removed yet,
// killing the children left in them: the signal handler of `cpuwork bench`
// calls it on SIGINT/SIGTERM before exiting.
func Cleanup() {
	live.Lock()
	defer live.Unlock()
	live.closing = true
	for g := range live.groups {
		g.Remove()
	}
	live.groups = nil
}

// SweepStale removes the cgroups that earlier bench processes created and
// left behind when they died (SIGKILL, a crash): groups named by
// newGroup whose owner process is gone, killing what still runs in them
// (cgroup.SweepOwned). It returns the directories it removed.
func SweepStale() []string {
	var out []string
	for _, p := range groupPrefixes {
		for _, sw := range cgroup.SweepOwned("", p) {
			d := sw.Dir
			if len(sw.Killed) > 0 {
				d += fmt.Sprintf(" (killed %v left in it)", sw.Killed)
			}
			out = append(out, d)
		}
	}
	return out
}
