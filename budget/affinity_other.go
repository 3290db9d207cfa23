//go:build !linux

package budget

import (
	"errors"
	"runtime"
)

// haveProc: no cgroups, /proc or affinity masks here; the budget is
// runtime.NumCPU() (which on this system already reflects what the OS
// reports as usable).
const haveProc = false

func affinityOf(pid int) (int, error) {
	if pid != 0 {
		return 0, errors.ErrUnsupported
	}
	return runtime.NumCPU(), nil
}
