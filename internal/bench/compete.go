package bench

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/cpuwork/cpuwork/cgroup"
	"golang.org/x/sys/unix"
)

// competition is what else runs on the machine while the variants of a
// scenario run: nothing, or one ordinary CPU-bound process (a shell busy
// loop) that the bench starts before and kills after, on every path.
type competition struct {
	Name string // "" (alone), "nice0", "nice19", "sibling"
	Desc string
}

// Competitions lists the cases the priority and timers scenarios run in.
var Competitions = []competition{
	{"", "alone: nothing else competes for the CPU"},
	{"nice0", "beside one CPU-bound process (sh busy loop) in the bench's own cgroup, at nice 0"},
	{"nice19", "beside the same process at nice 19"},
	{"sibling", "beside the same process in a cgroup of its own with the default weight (100 = 1024 shares), next to the bench's (needs root)"},
}

// CompetitionNames are the names --compete accepts.
func CompetitionNames() []string {
	out := []string{"alone"}
	for _, c := range Competitions[1:] {
		out = append(out, c.Name)
	}
	return out
}

// competitions returns the cases this run measures: Config.Compete, or by
// default alone, nice0 and sibling (alone and nice0 with Quick); nice19
// runs when asked for.
func (r *Runner) competitions() []competition {
	want := r.cfg.Compete
	if len(want) == 0 {
		if r.cfg.Quick {
			return Competitions[:2]
		}
		want = []string{"alone", "nice0", "sibling"}
	}
	var out []competition
	for _, c := range Competitions {
		name := c.Name
		if name == "" {
			name = "alone"
		}
		for _, w := range want {
			if w == name {
				out = append(out, c)
			}
		}
	}
	return out
}

// suffix is what a case adds to variant names: "" alone, "+nice0" etc.
func (c competition) suffix() string {
	if c.Name == "" {
		return ""
	}
	return "+" + c.Name
}

// start starts the competitor and returns the function that stops it and
// removes what it created. A case the machine cannot offer (no cgroup
// permission) returns an error saying why.
func (c competition) start() (stop func(), err error) {
	if c.Name == "" {
		return func() {}, nil
	}
	var g *cgroup.Group
	if c.Name == "sibling" {
		if os.Geteuid() != 0 {
			return nil, fmt.Errorf("%w: the sibling-cgroup case needs root to create a cgroup", cgroup.ErrPermission)
		}
		g, err = cgroup.New(cgroup.Config{Name: fmt.Sprintf("compete-%d", os.Getpid()), Weight: 100})
		if err != nil {
			return nil, err
		}
	}
	cmd := exec.Command("sh", "-c", "while :; do :; done")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		if g != nil {
			g.Remove()
		}
		return nil, fmt.Errorf("start the competitor: %w", err)
	}
	stop = func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
		if g != nil {
			g.Remove()
		}
	}
	switch c.Name {
	case "nice19":
		err = unix.Setpriority(unix.PRIO_PROCESS, cmd.Process.Pid, 19)
	case "sibling":
		err = g.Add(cmd.Process.Pid)
	}
	if err != nil {
		stop()
		return nil, fmt.Errorf("competitor %s: %w", c.Name, err)
	}
	time.Sleep(20 * time.Millisecond) // let it reach the busy loop
	return stop, nil
}

// baseName strips a competition suffix from a variant name.
func baseName(v string) (base, suffix string) {
	if i := strings.IndexByte(v, '+'); i >= 0 {
		return v[:i], v[i:]
	}
	return v, ""
}
