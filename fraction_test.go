package cpuwork

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cpuwork/cpuwork/budget"
)

// A quota applied after New (a container's limit raised or set while the
// service runs; the executor started before the cgroup was joined) gets
// its fractional slot as one present at New does; and one removed again
// gives the slot count back to the budget.
func TestFractionalQuotaAppliedAfterNewGetsItsExtraSlot(t *testing.T) {
	dir := t.TempDir()
	var quota atomic.Bool
	detect := func() (budget.Budget, error) {
		if !quota.Load() {
			return budget.Budget{Cores: 2, GOMAXPROCS: 2, Affinity: 2, Source: budget.SourceAffinity}, nil
		}
		return budget.Budget{Cores: 1.5, GOMAXPROCS: 2, Affinity: 2, Source: budget.SourceCgroupV1,
			Limits: []budget.Limit{{Dir: dir, Period: 100 * time.Millisecond, Cores: 1.5}}}, nil
	}
	e := newExec(t, Options{WatchInterval: time.Millisecond, detect: detect})
	if e.slotsNow() != 2 || e.frac.Load() != nil {
		t.Fatalf("no quota: %d slots, pacer %v; want 2 and none", e.slotsNow(), e.frac.Load() != nil)
	}
	quota.Store(true)
	waitUntil(t, "the 1.5-CPU quota's fractional slot", func() bool { return e.frac.Load() != nil && e.slotsNow() == 2 })
	if whole, frac, _ := e.frac.Load().Quota(); whole != 1 || frac != 0.5 {
		t.Errorf("pacer: %d slots always open, fraction %v; want 1 and 0.5", whole, frac)
	}
	quota.Store(false)
	waitUntil(t, "the pacer off once the quota is gone", func() bool {
		_, frac, open := e.frac.Load().Quota()
		return frac == 0 && open
	})
	if e.slotsNow() != 2 {
		t.Errorf("quota gone: %d slots, want 2", e.slotsNow())
	}
	if err := e.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A GOMAXPROCS below ceil(quota) leaves the fractional slot without a P
// for tasks that run Go code: once the executor has seen its tasks run Go
// code, it says so in the log and in Stats, with the fix, instead of
// running floor(quota) slots silently.
func TestGOMAXPROCSBelowTheQuotaIsLogged(t *testing.T) {
	dir := t.TempDir()
	detect := func() (budget.Budget, error) {
		return budget.Budget{Cores: 1.5, GOMAXPROCS: 1, Affinity: 2, Source: budget.SourceCgroupV1,
			Limits: []budget.Limit{{Dir: dir, Period: 100 * time.Millisecond, Cores: 1.5}}}, nil
	}
	var buf syncBuffer
	e := newExec(t, Options{WatchInterval: time.Hour, detect: detect, Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	if e.slotsNow() != 1 {
		t.Errorf("%d slots, want 1 (one P)", e.slotsNow())
	}
	deadline := time.Now().Add(10 * time.Second)
	for e.Stats().Warning == "" && time.Now().Before(deadline) {
		e.Do(context.Background(), Interactive, func(ctx context.Context) error {
			for t0 := time.Now(); time.Since(t0) < time.Millisecond; {
			}
			return nil
		})
	}
	if s := buf.String(); !strings.Contains(s, "GOMAXPROCS 1") || !strings.Contains(s, "1.5") {
		t.Errorf("log %q: want a warning naming GOMAXPROCS 1 and the 1.5-CPU quota", s)
	}
	if e.slotsNow() != 1 {
		t.Errorf("%d slots after Go-code tasks, want 1", e.slotsNow())
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached in 10 s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// syncBuffer is a log sink safe for the executor's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Stats.Pacing reports what the pacer reports: whether it paces, its
// target, what the throttle feedback did, the occupancy the door divides
// by, and the pause and objective it judged pacing by (the time closed
// moves while the pacer runs; the pacer's own test checks it).
func TestStatsReportThePacing(t *testing.T) {
	e := newExec(t, Options{WatchInterval: -1, detect: quota15(t)})
	defer e.Close(context.Background())
	ps, got := e.frac.Load().Stats(), e.Stats().Pacing
	if !got.Paced || !ps.Paced || got.Target != ps.Target || ps.Target == 0 ||
		got.Lowered != ps.Lowered || got.Held != ps.Held || got.Occupancy != ps.Occupancy || got.Pause != ps.Pause ||
		got.Objective != ps.Objective || got.Absorbed != ps.Absorbed {
		t.Fatalf("a 1.5-CPU quota: Stats.Pacing %+v, the pacer's %+v", got, ps)
	}
	if st := newExec(t, Options{Slots: 2}).Stats(); st.Pacing.Paced || st.Pacing.Target != 0 {
		t.Errorf("no quota: pacing %+v, want zero", st.Pacing)
	}
}

// The executor feeds its pacer the slots held and whether a task queues,
// and the door divides by what the pacer measured: both slots of a
// 1.5-CPU quota held while a task queues move the divisor toward 2, from
// 1.5 before anything queued.
func TestThePacersOccupancyReachesTheDoor(t *testing.T) {
	e := newExec(t, Options{WatchInterval: -1, detect: quota15(t)})
	defer e.Close(context.Background())
	if got, occ := e.g.Snapshot(0).ServiceSlots, e.Stats().Pacing.Occupancy; got != 1.5 || occ != 1.5 {
		t.Fatalf("nothing queued yet: the door divides by %v, Stats.Pacing.Occupancy %v; want the quota's 1.5", got, occ)
	}
	release := hold(t, e, 2)
	done := make(chan error, 1)
	go func() { done <- e.Do(context.Background(), Interactive, func(context.Context) error { return nil }) }()
	waitQueued(t, e, Interactive, 1)
	// The pacer samples the slots held at each tick (2 ms), a moving
	// average over about a period (100 ms).
	waitUntil(t, "the door's divisor near 2", func() bool { return e.g.Snapshot(0).ServiceSlots > 1.9 })
	occ := e.Stats().Pacing.Occupancy
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if occ <= 1.9 {
		t.Errorf("both slots held while a task queued: the door divides by more than 1.9, Stats.Pacing.Occupancy %v", occ)
	}
}

// quota15 is a budget detector that reports a 1.5-CPU cgroup v1 quota
// (100 ms period) in a directory of its own, for executors whose pacer a
// test drives.
func quota15(t *testing.T) func() (budget.Budget, error) {
	dir := t.TempDir()
	return func() (budget.Budget, error) {
		return budget.Budget{Cores: 1.5, GOMAXPROCS: 2, Affinity: 2, Source: budget.SourceCgroupV1,
			Limits: []budget.Limit{{Dir: dir, Period: 100 * time.Millisecond, Cores: 1.5}}}, nil
	}
}

// A pacer that cannot pace (it says so once, with the counts: the
// pacer's own test) shows it in Stats.Pacing.Warning with what to set,
// and the executor logs it.
func TestAnUnpaceableQuotaIsInStatsAndTheLog(t *testing.T) {
	var buf syncBuffer
	e := newExec(t, Options{WatchInterval: -1, detect: quota15(t), Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	defer e.Close(context.Background())
	if w := e.Stats().Pacing.Warning; w != "" {
		t.Fatalf("a new executor's pacing warning %q, want none", w)
	}
	(*pacerHost)(e).Unpaceable(14, 40)
	if w := e.Stats().Pacing.Warning; !strings.Contains(w, "14 of 40") || !strings.Contains(w, "QuotaFloor") {
		t.Errorf("Stats.Pacing.Warning %q: want the counts and what to set", w)
	}
	if !strings.Contains(buf.String(), "cannot be paced") {
		t.Errorf("log %q: want the warning", buf.String())
	}
}
