package demote

import (
	"testing"
)

// The batch group leaves the rest of the process batchGroupTarget of the
// quota and the headroom over its peak use, never less than its least.
func TestBatchCapLeavesTheRestItsPeak(t *testing.T) {
	for _, c := range []struct{ quota, others, want float64 }{
		{1.5, 0, 1.425},
		{1.5, 1, 1.425 - 1.1},
		{1.5, 1.5, batchGroupMin},
		{4, 2, 3.8 - 2.2},
	} {
		if got := batchCap(c.quota, c.others); got < c.want-1e-9 || got > c.want+1e-9 {
			t.Errorf("batchCap(%v, %v) = %v, want %v", c.quota, c.others, got, c.want)
		}
	}
}

// A changed quota (the budget watcher's) is what the next cap is set
// against; a quota gone (0) leaves the last one.
func TestBatchGroupFollowsTheQuota(t *testing.T) {
	b := &Group{quota: 1.5, cap: batchGroupMin}
	if next, last := b.nextCap(1); next != batchCap(1.5, 1) || last != batchGroupMin {
		t.Errorf("nextCap = %v, %v; want %v, %v", next, last, batchCap(1.5, 1), batchGroupMin)
	}
	b.SetQuota(3)
	if next, _ := b.nextCap(1); next != batchCap(3, 1) {
		t.Errorf("after the quota went to 3 cores, nextCap = %v, want %v", next, batchCap(3, 1))
	}
	b.SetQuota(0)
	if next, _ := b.nextCap(1); next != batchCap(3, 1) {
		t.Errorf("after the quota went away, nextCap = %v, want the last quota's %v", next, batchCap(3, 1))
	}
}
