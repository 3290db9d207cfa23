package bench

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/cpuwork/cpuwork/cgroup"
	"github.com/cpuwork/cpuwork/osthread"
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
		if !r.cfg.Thorough {
			return Competitions[:2] // alone and beside one CPU-bound process at nice 0
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
// removes what it created, and alive, which reports whether the competitor
// still runs (a case whose competitor died is not a competition case). A
// case the machine cannot offer (no cgroup permission) returns an error
// saying why.
//
// The competitor dies with the bench (Pdeathsig), which the kernel ties to
// the thread that forked it: the fork happens on a goroutine locked to its
// thread until stop, never on a thread that a locked goroutine (a demoted
// worker) could later take and end.
func (c competition) start() (stop func(), alive func() bool, err error) {
	if c.Name == "" {
		return func() {}, func() bool { return true }, nil
	}
	var g *cgroup.Group
	if c.Name == "sibling" {
		if os.Geteuid() != 0 {
			return nil, nil, fmt.Errorf("%w: the sibling-cgroup case needs root to create a cgroup", cgroup.ErrPermission)
		}
		g, err = newGroup("compete", cgroup.Config{Weight: 100})
		if err != nil {
			return nil, nil, err
		}
	}
	cmd := exec.Command("sh", "-c", "while :; do :; done")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	started, quit, exited := make(chan error), make(chan struct{}), make(chan struct{})
	go func() {
		// Pdeathsig fires when the forking thread exits: keep it locked
		// until the competitor is stopped (never the main thread, which
		// the runtime could not discard afterwards).
		osthread.LockNonMain(func() {
			if err := cmd.Start(); err != nil {
				started <- err
				return
			}
			started <- nil
			go func() { cmd.Wait(); close(exited) }()
			<-quit
		})
	}()
	if err := <-started; err != nil {
		if g != nil {
			removeGroup(g)
		}
		return nil, nil, fmt.Errorf("start the competitor: %w", err)
	}
	stop = func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
		close(quit)
		if g != nil {
			removeGroup(g)
		}
	}
	alive = func() bool {
		select {
		case <-exited:
			return false
		default:
			return true
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
		return nil, nil, fmt.Errorf("competitor %s: %w", c.Name, err)
	}
	time.Sleep(20 * time.Millisecond) // let it reach the busy loop
	return stop, alive, nil
}

// died is the error of a run whose competitor was found dead after it: the
// run was not a competition case.
func (c competition) died() error {
	return fmt.Errorf("the competitor of case %s died during the run", c.Name)
}

// baseName strips a competition suffix from a variant name.
func baseName(v string) (base, suffix string) {
	if i := strings.IndexByte(v, '+'); i >= 0 {
		return v[:i], v[i:]
	}
	return v, ""
}

// eachCase runs the variants of s in every competition case, r.rounds
// times: each round visits the cases in a shuffled order, starts the
// case's competitor (a case whose competitor cannot start leaves its
// variants not measured, with the reason), calls reference (if not nil)
// for the case's reference step of this round, warms the variants up in
// the first round, then runs every variant of the case once in a shuffled
// order. once runs one variant and records the result unless warm; an
// error, or a competitor found dead after the run, marks the variant
// invalid. The competitor is stopped on every path.
//
// firstOnly, when not nil, names the variants (and reference, when it
// returns true for nil) that the default run measures in the first round
// only: a floor or a reference shown beside the verdicts, not compared
// pair by pair (--thorough measures them every round).
func (r *Runner) eachCase(s *Scenario, scenario string, cases []competition, checks func() []check, reference func(cc competition), firstOnly func(v *Variant) bool, once func(cc competition, v *Variant, warm bool) error) {
	byCase := map[string][]*Variant{}
	for _, v := range s.Variants {
		_, suf := baseName(v.Name)
		byCase[suf] = append(byCase[suf], v)
	}
	failed := map[string]bool{}
	r.pairs(s, checks, func(round int) {
		for _, cc := range shuffledOf(r, cases) {
			vs := byCase[cc.suffix()]
			skip := func() {
				r.done += len(vs)
				if reference != nil {
					r.done++
				}
			}
			if failed[cc.Name] {
				skip()
				continue
			}
			func() {
				stop, alive, err := cc.start()
				if err != nil {
					for _, v := range vs {
						v.Valid, v.Invalid = false, "not measured: "+err.Error()
					}
					s.Notes = append(s.Notes, fmt.Sprintf("case %s not measured: %v", cc.Name, err))
					failed[cc.Name] = true
					skip()
					return
				}
				defer stop()
				later := round > 0 && !r.cfg.Thorough && firstOnly != nil
				if reference != nil && !(later && firstOnly(nil)) {
					reference(cc)
				}
				if round == 0 {
					r.warmUp(scenario+cc.suffix(), vs, func(v *Variant) { once(cc, v, true) })
				}
				for _, v := range shuffledOf(r, vs) {
					if later && firstOnly(v) {
						continue
					}
					r.step(fmt.Sprintf("%s: %s (pair %d)", scenario, v.Name, round+1))
					err := once(cc, v, false)
					if err == nil && !alive() {
						err = cc.died()
					}
					if err != nil {
						v.Valid, v.Invalid = false, err.Error()
					}
				}
			}()
		}
	})
}
