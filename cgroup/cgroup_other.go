//go:build !linux

package cgroup

import (
	"fmt"
	"os"
	"runtime"

	"github.com/cpuwork/cpuwork/budget"
)

// Group is a cgroup created by New. Control groups are Linux's: on this
// system New always fails with ErrUnsupported and no Group exists.
type Group struct{}

var errNoCgroups = fmt.Errorf("%w: control groups are Linux-only (GOOS %s)", ErrUnsupported, runtime.GOOS)

// Version returns 0: no cgroups on this system.
func Version() int { return 0 }

// New returns an error wrapping ErrUnsupported: control groups are
// Linux-only.
func New(c Config) (*Group, error) {
	if err := validName(c.Name); err != nil {
		return nil, err
	}
	return nil, errNoCgroups
}

// Path returns "".
func (g *Group) Path() string { return "" }

// Dir returns "".
func (g *Group) Dir() string { return "" }

// Add returns an error wrapping ErrUnsupported.
func (g *Group) Add(pid int) error { return errNoCgroups }

// ProcsFile returns "".
func (g *Group) ProcsFile() string { return "" }

// ProcsFiles returns nil.
func (g *Group) ProcsFiles() []string { return nil }

// AddThread returns an error wrapping ErrUnsupported.
func (g *Group) AddThread(tid int) error { return errNoCgroups }

// SetCPUs is unsupported outside Linux.
func (g *Group) SetCPUs(cores float64) error { return errNoCgroups }

// Stat returns an error wrapping ErrUnsupported.
func (g *Group) Stat() (budget.Stat, error) { return budget.Stat{}, errNoCgroups }

// Pids returns an error wrapping ErrUnsupported.
func (g *Group) Pids() ([]int, error) { return nil, errNoCgroups }

// Remove returns nil: there is nothing to remove.
func (g *Group) Remove() error { return nil }

// OpenProcs returns an error wrapping ErrUnsupported.
func (g *Group) OpenProcs() ([]*os.File, error) { return nil, errNoCgroups }

// OwnedName returns prefix-PID-0.
func OwnedName(prefix string) string { return fmt.Sprintf("%s-%d-0", prefix, os.Getpid()) }

// Swept is a group SweepOwned removed (never, outside Linux).
type Swept struct {
	Dir    string
	Killed []int
}

// SweepOwned returns nil: there is nothing to sweep.
func SweepOwned(parent, prefix string) []Swept { return nil }
