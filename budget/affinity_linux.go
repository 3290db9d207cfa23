package budget

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// haveProc: cgroups, /proc and affinity masks are read (Linux).
const haveProc = true

// affinityOf counts the CPUs in pid's affinity mask (0: the calling
// thread), sched_getaffinity(2); cpusets show up here.
func affinityOf(pid int) (int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(pid, &set); err != nil {
		return 0, fmt.Errorf("budget: sched_getaffinity(%d): %w", pid, err)
	}
	return set.Count(), nil
}
