package demote

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/cpuwork/cpuwork/cgroup"
)

// The batch group. Under a CPU quota, Beside's batch threads spend quota
// the budget's requests need: demoted (SCHED_IDLE) they lose every CPU to
// a request thread, but once the cgroup's quota is spent the kernel
// freezes every thread for the rest of the period, the requests' too. So
// under a quota the demoted threads run in a child cgroup of the
// process's own (cgroup v1: threads move one by one; a threaded v2
// subtree is not set up), of weight batchGroupShares, whose quota follows
// what the rest of the process leaves: every batchGroupTick it is set to
// batchGroupTarget of the quota less batchGroupHeadroom times the most
// the rest used in a tick of the last batchGroupWindow (at least
// batchGroupMin). Its period is short (batchGroupPeriod) because a
// thread frozen by it while it holds a P delays every stop-the-world of
// the garbage collector until its next period.
const (
	batchGroupTick     = 20 * time.Millisecond
	batchGroupWindow   = 10 // ticks: 200 ms
	batchGroupTarget   = 0.95
	batchGroupHeadroom = 1.1
	batchGroupMin      = 0.2 // cores: the kernel's least quota at the period below
	batchGroupPeriod   = 5 * time.Millisecond
	batchGroupShares   = 2
	batchGroupPrefix   = "cpuwork-batch"
)

// batchCap is the batch group's quota in cores, under a quota of quota
// cores of which the rest of the process used at most others lately.
func batchCap(quota, others float64) float64 {
	return max(batchGroupMin, quota*batchGroupTarget-others*batchGroupHeadroom)
}

// Group is the child cgroup of one executor's demoted batch threads
// and the loop that sets its quota.
type Group struct {
	g     *cgroup.Group
	quota float64 // cores of the process's quota (mu)
	// procCPU is the process's CPU time (every thread's, the batch
	// threads' included).
	procCPU func() time.Duration

	mu      sync.Mutex
	threads map[int]int32 // tid -> its CPU-time clock
	retired int64         // ns of CPU of the threads that left
	cap     float64       // cores, as last set

	stop, done chan struct{}
}

// NewGroup creates the batch group under the calling process's own
// cgroup for the quota of quota cores that the cgroup at dir sets, and
// starts its loop; the error says why it cannot (cgroup v2, no
// permission, no CPU controller, dir not a cgroup with a quota).
func NewGroup(dir string, quota float64, procCPU func() time.Duration) (*Group, error) {
	if cgroup.Version() != 1 {
		return nil, fmt.Errorf("a child cgroup for threads needs cgroup v1 here (a threaded cgroup v2 subtree is not set up)")
	}
	if _, err := os.Stat(filepath.Join(dir, "cpu.cfs_quota_us")); err != nil {
		return nil, fmt.Errorf("the quota's cgroup %q cannot be read: %w", dir, err)
	}
	// The groups of processes gone (a crash skips close) first: those
	// New recorded, whose owner no longer runs.
	cgroup.SweepOwned("", batchGroupPrefix)
	cap := batchCap(quota, quota) // until the rest's use is measured: the least
	g, err := cgroup.New(cgroup.Config{Name: cgroup.OwnedName(batchGroupPrefix), CPUs: cap,
		Period: batchGroupPeriod, Shares: batchGroupShares})
	if err != nil {
		return nil, err
	}
	b := &Group{g: g, quota: quota, procCPU: procCPU, threads: map[int]int32{}, cap: cap,
		stop: make(chan struct{}), done: make(chan struct{})}
	go b.run()
	return b, nil
}

// add moves thread tid, a demoted batch worker's, into the group.
func (b *Group) add(tid int) error {
	if err := b.g.AddThread(tid); err != nil {
		return err
	}
	b.mu.Lock()
	b.threads[tid] = threadClock(tid)
	b.mu.Unlock()
	return nil
}

// remove forgets thread tid, called on the thread before it exits: its
// CPU time so far stays counted as the group's.
func (b *Group) remove(tid int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if c, ok := b.threads[tid]; ok {
		if ns, ok := threadCPU(c); ok {
			b.retired += ns
		}
		delete(b.threads, tid)
	}
}

// cpu is the CPU time the group's threads have used.
func (b *Group) cpu() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	ns := b.retired
	for _, c := range b.threads {
		if x, ok := threadCPU(c); ok {
			ns += x
		}
	}
	return time.Duration(ns)
}

// run sets the group's quota every batchGroupTick until close.
func (b *Group) run() {
	defer close(b.done)
	t := time.NewTicker(batchGroupTick)
	defer t.Stop()
	var recent [batchGroupWindow]float64
	i := 0
	last, lastProc, lastBatch := time.Now(), b.procCPU(), b.cpu()
	for {
		select {
		case <-b.stop:
			return
		case now := <-t.C:
			proc, batch := b.procCPU(), b.cpu()
			if dt := now.Sub(last).Seconds(); dt > 0 {
				recent[i%len(recent)] = max(0, (proc-lastProc-(batch-lastBatch)).Seconds()/dt)
				i++
			}
			last, lastProc, lastBatch = now, proc, batch
			others := 0.0
			for _, x := range recent {
				others = max(others, x)
			}
			if c, old := b.nextCap(others); math.Abs(c-old) >= 0.01 && b.g.SetCPUs(c) == nil {
				b.mu.Lock()
				b.cap = c
				b.mu.Unlock()
			}
		}
	}
}

// nextCap is the group's quota for the rest's peak use others (cores),
// against the process's quota now, and the group's quota as last set.
func (b *Group) nextCap(others float64) (next, last float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return batchCap(b.quota, others), b.cap
}

// SetQuota follows a changed quota of the process (the budget watcher):
// the next tick caps the group against it.
func (b *Group) SetQuota(cores float64) {
	if cores > 0 {
		b.mu.Lock()
		b.quota = cores
		b.mu.Unlock()
	}
}

// Cores is the group's quota now, in cores.
func (b *Group) Cores() float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cap
}

// Path is the group's cgroup path.
func (b *Group) Path() string { return b.g.Path() }

// Dir is the group's cgroup directory.
func (b *Group) Dir() string { return b.g.Dir() }

// Close stops the loop and removes the group, moving any thread of this
// process still in it back to the cgroup it came from. Called once the
// demoted workers have stopped.
func (b *Group) Close() error {
	close(b.stop)
	<-b.done
	return b.g.Remove()
}
