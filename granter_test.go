package cpuwork

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cpuwork/cpuwork/internal/admission"
)

// A slot given back twice is detected: the second release is ignored and
// logged, so the executor never runs more tasks at once than it has
// slots. Without the check, free counted 2 slots on a 1-slot executor and
// two tasks ran at once.
func TestADoubleReleaseIsDetectedAndIgnored(t *testing.T) {
	var log bytes.Buffer
	e := newExec(t, Options{Slots: 1, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	w := admission.MakeWaiter(admission.Interactive, admission.KindCaller, nil)
	e.releaseSlot(&w) // nobody holds a slot: a double release
	if n := e.g.Snapshot(0).DoubleReleases; n != 1 {
		t.Fatalf("double releases counted %d, want 1", n)
	}
	if st := e.Stats(); st.Free != 1 {
		t.Fatalf("%d slots free on a 1-slot executor after a double release", st.Free)
	}
	if !strings.Contains(log.String(), "released twice") {
		t.Errorf("no error logged for the double release: %q", log.String())
	}
	var running, most atomic.Int32
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.Do(context.Background(), Interactive, func(context.Context) error {
				n := running.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(5 * time.Millisecond)
				running.Add(-1)
				return nil
			})
		}()
	}
	wg.Wait()
	if m := most.Load(); m != 1 {
		t.Fatalf("%d tasks ran at once on a 1-slot executor", m)
	}
}

// The capacity follows the fractional slot: closing it takes a slot out of
// the free count and the capacity together, so a task's release while it
// is closed is not taken for a double release, and opening it gives the
// slot back.
func TestTheFractionalSlotChangesCapacityNotReleases(t *testing.T) {
	e := newExec(t, Options{Slots: 2})
	ctx := context.Background()
	hold := make(chan struct{})
	started := make(chan struct{})
	go e.Do(ctx, Interactive, func(context.Context) error { close(started); <-hold; return nil })
	<-started
	e.g.Pacer().SetExtraOpen(false) // 1 slot of capacity, held
	close(hold)
	deadline := time.Now().Add(10 * time.Second)
	for e.Stats().Classes[Interactive].Running != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if st := e.Stats(); st.Free != 1 {
		t.Fatalf("%d free with the extra slot closed and nothing running, want 1", st.Free)
	}
	e.g.Pacer().SetExtraOpen(true)
	if st := e.Stats(); st.Free != 2 {
		t.Fatalf("%d free with the extra slot open again, want 2", st.Free)
	}
	if n := e.g.Snapshot(0).DoubleReleases; n != 0 {
		t.Fatalf("%d releases taken for double releases", n)
	}
}

// A release racing a shrinking capacity is not taken for a double
// release. The release added to free, then read the capacity: a shrink
// between the two (free lowered, then the capacity) made the capacity it
// read smaller than the free count it had computed before the shrink, so
// a correct release was undone and its slot lost for good (the stress
// test saw "1 slots released twice" with a budget flipping between whole
// and fractional quotas).
func TestAReleaseRacingAShrinkingCapacityIsNotADoubleRelease(t *testing.T) {
	e := newExec(t, Options{Slots: 4})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := admission.MakeWaiter(admission.Interactive, admission.KindCaller, nil)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if e.g.TryAcquire(admission.Interactive) {
					e.releaseSlot(&w)
				}
			}
		}()
	}
	deadline := time.Now().Add(300 * time.Millisecond)
	for i := 0; time.Now().Before(deadline) && e.g.Snapshot(0).DoubleReleases == 0; i++ {
		e.SetSlots(1 + 3*(i%2))
		e.g.Pacer().SetExtraOpen(i%3 != 0)
	}
	close(stop)
	wg.Wait()
	e.g.Pacer().SetExtraOpen(true)
	if n := e.g.Snapshot(0).DoubleReleases; n != 0 {
		t.Fatalf("%d correct releases taken for double releases", n)
	}
	if st := e.Stats(); st.Free != st.Slots {
		t.Fatalf("%d of %d slots free with nothing running", st.Free, st.Slots)
	}
}
