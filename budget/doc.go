// Package budget finds the CPU a Go process can really use: its effective
// CPU budget in cores (float64, 1.25 = 1250m) and the inputs it came from.
//
// The budget is the smallest of
//
//   - the number of CPUs in the affinity mask (sched_getaffinity(2); a
//     cpuset restricts it too), and
//   - every CFS bandwidth limit on the way from the process's cgroup up to
//     the root of the hierarchy visible in its mount namespace: cgroup v2
//     cpu.max, cgroup v1 cpu.cfs_quota_us / cpu.cfs_period_us
//     (Documentation/scheduler/sched-bwc.rst).
//
// The Go runtime (Go >= 1.25) reads only the leaf cgroup's limit and rounds
// up: its default GOMAXPROCS is min(affinity, max(2, ceil(quota)))
// (GOROOT/src/runtime/cgroup_linux.go). A container limited to 1.25 CPUs on
// a 2-CPU node therefore runs 2 Ps, and two CPU-bound goroutines spend the
// quota early in every 100 ms period, after which the kernel throttles every
// thread of the cgroup until the period ends. Budget.Slots rounds down
// instead, and Budget.Warning says when the two disagree.
//
// Which hierarchy holds the CPU controller and how its directory is found
// follow the runtime's own reader (GOROOT/src/internal/runtime/cgroup): a
// v1 hierarchy with "cpu" wins over v2; mounts whose root is not a prefix of
// the cgroup path, and paths outside the cgroup namespace ("/.."), are not
// used. Unlike the runtime, Detect walks the ancestors, so a limit set on a
// parent (a Kubernetes pod, a systemd slice) is seen.
//
// Throttling is read with ReadStat (cpu.stat: nr_periods, nr_throttled,
// throttled time), and Watch re-reads the budget periodically so a running
// executor can follow a changed quota or GOMAXPROCS.
//
// Nothing here changes the process: it only reads. To set GOMAXPROCS from
// the budget, see the maxprocs package.
package budget
