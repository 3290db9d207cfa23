package admission

import (
	"math"
	"testing"
	"time"
)

// step is one interval fed to a queueController alone: its arrivals'
// work as a multiple of what one slot could do in it, the arrivals
// (those that took a free slot at once among them), the completions, the
// smallest granted queue wait (negative: no queued grant), the arrivals
// it refused, and whether the arrivals came without given run times.
type step struct {
	load                 float64
	arrivals, free, done uint64
	minWait              time.Duration
	refused              uint64
	guessed              bool
	lowerHeld            float64 // the share of the interval's slot time a less urgent class held
	lowerWaiting         bool    // a less urgent class had tasks queued at the interval's end
	spare                float64 // reading.spare: the share a CPU quota leaves the slots idle at no cost
}

const ms = int64(time.Millisecond)

// run feeds q the steps, one interval of codelInterval each on one slot
// (an average slot time of 10 ms), and returns q's state after each.
func (q *queueController) run(steps ...step) []doorMode {
	iv := int64(codelInterval)
	var modes []doorMode
	for _, s := range steps {
		queued := s.arrivals - s.free
		for range queued {
			q.offer(int64(s.load*float64(iv))/int64(max(queued, 1)), !s.guessed)
		}
		if s.minWait >= 0 && queued > 0 {
			q.granted(int64(s.minWait))
			q.granted(int64(s.minWait) + ms) // a second grant, waited longer
		}
		q.iv.refused = s.refused
		r := reading{t: q.iv.start + iv, avgSlot: 10 * ms, slots: 1,
			admitted: q.iv.admittedAt + q.iv.grants + s.free, completed: q.iv.completedAt + s.done,
			used: q.iv.usedAt, others: 1 << Batch, lower: 1 << Batch, lowerWaiting: s.lowerWaiting, spare: s.spare}
		r.used[Batch] += int64(s.lowerHeld * float64(iv))
		if !q.due(r.t, r.avgSlot) {
			panic("an interval of codelInterval did not end")
		}
		q.endInterval(r)
		modes = append(modes, q.mode)
	}
	return modes
}

func (m doorMode) String() string { return [...]string{"calm", "shedding", "overload"}[m] }

// alternate is n pairs of a and b.
func alternate(n int, a, b step) []step {
	var out []step
	for range n {
		out = append(out, a, b)
	}
	return out
}

// repeat is n copies of s.
func repeat(n int, s step) []step {
	out := make([]step, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// The controller's onset, stop and overload marks, fed intervals alone:
// each row a sequence and the state it must end in.
func TestTheControllersStatesFollowItsIntervals(t *testing.T) {
	standing := step{load: 2, arrivals: 20, done: 10, minWait: 30 * time.Millisecond, refused: 3}
	calmAt := func(load float64) step { return step{load: load, arrivals: 8, done: 8, minWait: time.Millisecond} }
	for _, c := range []struct {
		what  string
		steps []step
		want  doorMode
	}{
		{"a queue standing above the target while the arrivals bring 2x the slot's work: overload", []step{standing}, overload},
		{"a queue standing at 1.2x: shedding, not a clear overload",
			[]step{{load: 1.2, arrivals: 12, done: 10, minWait: 30 * time.Millisecond}}, shedding},
		{"a queue standing at 0.9x drains by itself: calm",
			[]step{{load: 0.9, arrivals: 9, done: 9, minWait: 30 * time.Millisecond}}, calm},
		{"a smallest wait under the target at 2x: calm",
			[]step{{load: 2, arrivals: 20, done: 10, minWait: 7 * time.Millisecond}}, calm},
		{"an arrival found a free slot: the queue drained, calm",
			[]step{{load: 2, arrivals: 20, free: 1, done: 10, minWait: 30 * time.Millisecond}}, calm},
		{"12 arrivals without given run times against 5 completions, a quarter of the work: overload",
			[]step{{load: 0.25, arrivals: 12, done: 5, minWait: 30 * time.Millisecond, guessed: true}}, overload},
		{"5 arrivals without given run times against 5 completions: calm",
			[]step{{load: 0.25, arrivals: 5, done: 5, minWait: 30 * time.Millisecond, guessed: true}}, calm},
		{"12 arrivals with given run times, a quarter of the work: calm",
			[]step{{load: 0.25, arrivals: 12, done: 5, minWait: 30 * time.Millisecond}}, calm},
		{"an interval without grants keeps calm",
			[]step{{load: 2, arrivals: 20, done: 10, minWait: -1}}, calm},
		{"a second at 0.8x (0.5x and 1.1x in turn) never starts it", alternate(5,
			step{load: 0.5, arrivals: 5, done: 5, minWait: 30 * time.Millisecond},
			step{load: 1.1, arrivals: 11, done: 10, minWait: 30 * time.Millisecond}), calm},
		{"then two intervals at 2x start it", append(alternate(5,
			step{load: 0.5, arrivals: 5, done: 5, minWait: 30 * time.Millisecond},
			step{load: 1.1, arrivals: 11, done: 10, minWait: 30 * time.Millisecond}), standing, standing), shedding},
		{"one calm interval of 8 arrivals does not stop it",
			[]step{standing, calmAt(1.5)}, shedding},
		{"calm intervals of 24 arrivals in a row stop it",
			[]step{standing, calmAt(0.8), calmAt(0.8), calmAt(0.8)}, calm},
		{"a refusing interval while outrunning the slots restarts the count",
			[]step{standing, calmAt(0.8), calmAt(0.8), standing, calmAt(0.8), calmAt(0.8)}, shedding},
		{"calm intervals for a second stop it, however few their arrivals",
			append([]step{standing}, repeat(10, step{load: 0.1, arrivals: 1, done: 1, minWait: time.Millisecond})...), calm},
		{"one interval at 2.5x after a second at 0.8x: shedding, not a clear overload",
			append(repeat(10, step{load: 0.8, arrivals: 8, done: 8, minWait: 30 * time.Millisecond}),
				step{load: 2.5, arrivals: 25, done: 10, minWait: 30 * time.Millisecond, refused: 1}), shedding},
	} {
		q := newQueueController(10*ms, 0)
		modes := q.run(c.steps...)
		if got := modes[len(modes)-1]; got != c.want {
			t.Errorf("%s: states %v, want %v at the end", c.what, modes, c.want)
		}
	}
}

// severe marks an interval of a shedding class that outran the slot 2x;
// the backlog is then refused at the head past 2 targets of wait, and at
// any wait once the budget is spent in overload.
func TestTheControllerMarksASevereOverloadAndItsBacklog(t *testing.T) {
	for _, c := range []struct {
		what         string
		steps        []step
		severe       bool
		waited       time.Duration
		spent        bool
		refusesAfter bool
	}{
		{"3x: severe, 25 ms waited refused", []step{{load: 3, arrivals: 30, done: 10, minWait: 20 * time.Millisecond, refused: 1}}, true, 25 * time.Millisecond, false, true},
		{"3x: severe, 15 ms waited served", []step{{load: 3, arrivals: 30, done: 10, minWait: 20 * time.Millisecond, refused: 1}}, true, 15 * time.Millisecond, false, false},
		{"1.5x: shedding, not severe", []step{{load: 1.5, arrivals: 15, done: 10, minWait: 20 * time.Millisecond, refused: 1}}, false, 25 * time.Millisecond, false, false},
		{"3 arrivals without run times and no completion: severe", []step{{load: 0.1, arrivals: 3, done: 0, minWait: 20 * time.Millisecond, refused: 1, guessed: true}}, true, 25 * time.Millisecond, false, true},
		{"shedding ended: neither", []step{{load: 3, arrivals: 30, done: 10, minWait: 20 * time.Millisecond, refused: 1},
			{load: 0.5, arrivals: shedCalmArrivals, done: 10, minWait: time.Millisecond}}, false, 25 * time.Millisecond, false, false},
		{"the budget spent in a clear overload: 1 ms waited refused", []step{{load: 2, arrivals: 20, done: 10, minWait: 20 * time.Millisecond, refused: 1}}, false, time.Millisecond, true, true},
	} {
		q := newQueueController(10*ms, 0)
		q.run(c.steps...)
		q.auto = true
		if q.severe != c.severe {
			t.Errorf("%s: severe %v", c.what, q.severe)
		}
		if got := q.refusesBacklog(int64(c.waited), q.spent(c.spent)); got != c.refusesAfter {
			t.Errorf("%s: refuses the backlog %v", c.what, got)
		}
	}
}

// The door's refusal while shedding: above the held limit (the target;
// an auto target's standingPeak times it, times the hold), unless the
// key is spared; any arrival while the budget is spent.
func TestTheControllerRefusesAboveItsHeldLimit(t *testing.T) {
	for _, c := range []struct {
		what          string
		mode          doorMode
		auto          bool
		hold          float64
		wait          time.Duration
		spent, spared bool
		want          bool
	}{
		{"calm, far above", calm, false, 0, time.Second, false, false, false},
		{"shedding, above the fixed target", shedding, false, 0, 11 * time.Millisecond, false, false, true},
		{"shedding, under the fixed target", shedding, false, 0, 9 * time.Millisecond, false, false, false},
		{"auto, under twice the target", shedding, true, 0, 19 * time.Millisecond, false, false, false},
		{"auto, above twice the target", shedding, true, 0, 21 * time.Millisecond, false, false, true},
		{"auto held at a quarter, above 5 ms", shedding, true, 0.25, 6 * time.Millisecond, false, false, true},
		{"auto, a spared key", shedding, true, 0, time.Second, false, true, false},
		{"the budget spent, no wait", overload, true, 0, 0, true, false, true},
	} {
		q := newQueueController(10*ms, 0)
		q.mode, q.auto, q.hold = c.mode, c.auto, c.hold
		if got := q.refuses(int64(c.wait), q.heldLimit(), c.spent, c.spared); got != c.want {
			t.Errorf("%s: refuses %v, want %v", c.what, got, c.want)
		}
		if want := map[bool]uint64{true: 1}[c.want]; q.iv.refused != want {
			t.Errorf("%s: %d refusals counted, want %d", c.what, q.iv.refused, want)
		}
	}
}

// The hold of a shedding auto-target class: down by holdDown each window
// of holdArrivals arrivals none of which found a free slot, to holdMin;
// up by holdUp after one where 9 % did; a new onset starts from 1.
func TestTheControllersHoldFollowsTheIdleSlots(t *testing.T) {
	q := newQueueController(10*ms, 0)
	q.auto = true
	busy := step{load: 4, arrivals: holdArrivals, done: 10, minWait: 30 * time.Millisecond, refused: 1}
	q.run(busy) // the onset
	if q.holdShare() != 1 {
		t.Fatalf("at onset: hold %v, want 1", q.holdShare())
	}
	for i := range 24 {
		q.run(busy)
		want := max(holdMin, math.Pow(holdDown, float64(i+1)))
		if math.Abs(q.holdShare()-want) > 1e-9 {
			t.Fatalf("after %d busy windows: hold %v, want %v", i+1, q.holdShare(), want)
		}
	}
	q.run(step{load: 4, arrivals: holdArrivals + 6, free: 6, done: 10, minWait: 30 * time.Millisecond, refused: 1})
	if want := holdMin * holdUp; math.Abs(q.holdShare()-want) > 1e-9 {
		t.Fatalf("after a window whose arrivals found a free slot 9 %% of the time: hold %v, want %v", q.holdShare(), want)
	}
	q.mode = calm
	q.run(step{load: 0.5, arrivals: 5, done: 5, minWait: time.Millisecond}, busy)
	if !q.sheds() || q.holdShare() != 1 {
		t.Fatalf("a new onset: sheds %v, hold %v; want shedding from a hold of 1", q.sheds(), q.holdShare())
	}
}

// Under a CPU quota of 1.5 cores on 2 slots the slots may idle a quarter
// of each period at no cost (the kernel freezes them for it once the
// quota is spent): windows whose arrivals found a slot free a fifth of
// the time bring the hold down there, and up without the quota; past the
// spare share by over holdIdleHigh, up again.
func TestTheHoldCountsTheSlotsAQuotaLeavesIdleAsBusy(t *testing.T) {
	const arrivals = 5 * holdArrivals / 4
	for _, c := range []struct {
		what  string
		spare float64
		free  uint64
		want  float64
	}{
		{"no quota, a fifth found a slot free", 0, arrivals / 5, 1},
		{"1.5 cores on 2 slots, a fifth found a slot free", 0.25, arrivals / 5, holdDown * holdDown},
		{"1.5 cores on 2 slots, 27.5 % found a slot free (between the bounds)", 0.25, arrivals * 275 / 1000, 1},
		{"1.5 cores on 2 slots, 30 % found a slot free", 0.25, arrivals * 30 / 100, 1},
	} {
		q := newQueueController(10*ms, 0)
		q.auto = true
		onset := step{load: 4, arrivals: holdArrivals, done: 10, minWait: 30 * time.Millisecond, refused: 1}
		w := step{load: 4, arrivals: arrivals, free: c.free, done: 10, minWait: 30 * time.Millisecond, refused: 1, spare: c.spare}
		q.run(onset, w, w)
		if math.Abs(q.holdShare()-c.want) > 1e-9 {
			t.Errorf("%s: hold %v after two windows, want %v", c.what, q.holdShare(), c.want)
		}
	}
	// From a low hold, a window past the spare share by over holdIdleHigh raises it.
	q := newQueueController(10*ms, 0)
	q.auto = true
	q.run(step{load: 4, arrivals: holdArrivals, done: 10, minWait: 30 * time.Millisecond, refused: 1})
	q.hold = 0.25
	q.run(step{load: 4, arrivals: arrivals, free: arrivals * 30 / 100, done: 10, minWait: 30 * time.Millisecond, refused: 1, spare: 0.25})
	if want := 0.25 * holdUp; math.Abs(q.holdShare()-want) > 1e-9 {
		t.Errorf("a hold of 0.25, 30 %% found a slot free under a spare 25 %%: hold %v, want %v", q.holdShare(), want)
	}
}

// Beside a less urgent class that holds a share of the slots, an
// arrival that finds none free takes one at its next release: the queue
// bought more than wait, and the hold does not fall (it rises) while that
// class held over holdLowerShare of the slot time. Below it, the hold
// falls as alone.
func TestTheHoldDoesNotFallWhileALessUrgentClassHoldsTheSlots(t *testing.T) {
	for _, c := range []struct {
		lowerHeld float64
		want      float64
	}{
		{0, holdDown * holdDown},
		{holdLowerShare / 2, holdDown * holdDown},
		{0.5, 1},
	} {
		q := newQueueController(10*ms, 0)
		q.auto = true
		busy := step{load: 4, arrivals: holdArrivals, done: 10, minWait: 30 * time.Millisecond, refused: 1, lowerHeld: c.lowerHeld}
		q.run(busy, busy, busy) // the onset, then two windows of the hold
		if math.Abs(q.holdShare()-c.want) > 1e-9 {
			t.Errorf("a less urgent class holding %v of the slot time: hold %v, want %v", c.lowerHeld, q.holdShare(), c.want)
		}
	}
}

// Beside a less urgent class with tasks queued, no slot ever idles (that
// class takes each one the queue leaves): the hold does not fall; once
// nobody of it waits, it falls as alone.
func TestTheHoldDoesNotFallWhileALessUrgentClassWaits(t *testing.T) {
	q := newQueueController(10*ms, 0)
	q.auto = true
	busy := step{load: 4, arrivals: holdArrivals, done: 10, minWait: 30 * time.Millisecond, refused: 1}
	waiting := busy
	waiting.lowerWaiting = true
	q.run(busy, waiting, waiting)
	if q.holdShare() != 1 {
		t.Fatalf("two windows beside a waiting less urgent class: hold %v, want 1", q.holdShare())
	}
	q.run(busy)
	if q.holdShare() != holdDown {
		t.Fatalf("a window with nobody less urgent waiting: hold %v, want %v", q.holdShare(), holdDown)
	}
}

// The early onset: a quarter of an interval in, arrivals bringing over
// 1.5x the slot's work in it and over the recent intervals start an
// overload held at holdEarly; less, or sooner, does not.
func TestTheControllersEarlyOnset(t *testing.T) {
	for _, c := range []struct {
		what                             string
		el                               time.Duration
		offered, sumOffered, sumCapacity float64 // ms
		want                             bool
	}{
		{"40 ms at 2x, fresh", 40 * time.Millisecond, 80, 0, 0, true},
		{"40 ms at 1.25x", 40 * time.Millisecond, 50, 0, 0, false},
		{"20 ms at 4x: under a quarter of the interval", 20 * time.Millisecond, 80, 0, 0, false},
		{"40 ms at 2x after a long calm", 40 * time.Millisecond, 80, 400, 1000, false},
	} {
		q := newQueueController(10*ms, 0)
		q.offer(int64(c.offered*float64(ms)), true)
		q.sumOffered, q.sumCapacity = c.sumOffered*float64(ms), c.sumCapacity*float64(ms)
		r := reading{t: int64(c.el), avgSlot: 10 * ms, slots: 1, admitted: 0}
		if got := q.earlyOnset(r); got != c.want || q.sheds() != c.want {
			t.Errorf("%s: onset %v, sheds %v; want %v", c.what, got, q.sheds(), c.want)
		}
		if c.want && (q.mode != overload || q.holdShare() != holdEarly) {
			t.Errorf("%s: state %v hold %v, want overload at %v", c.what, q.mode, q.holdShare(), holdEarly)
		}
	}
}

// A calm class leaves a latency target to the head while its recent
// arrivals, the current interval's with them, brought no more work than
// the slots could do; not before an interval has ended, not once they
// outran the slots, never while it sheds.
func TestACalmClassLeavesLatencyTargetsToTheHeadWhileTheSlotsKeepUp(t *testing.T) {
	for _, c := range []struct {
		what                             string
		mode                             doorMode
		el                               time.Duration
		offered, sumOffered, sumCapacity float64 // ms, one slot
		want                             bool
	}{
		{"no interval ended yet", calm, 40 * time.Millisecond, 10, 0, 0, false},
		{"at 0.8 of the slot", calm, 40 * time.Millisecond, 32, 400, 500, true},
		{"0.8 before, 2x in the last 40 ms: 449 of 502 ms", calm, 40 * time.Millisecond, 80, 400, 500, true},
		{"0.8 before, 2x for the last 100 ms", calm, 100 * time.Millisecond, 200, 400, 500, false},
		{"outran before, calm now", calm, 40 * time.Millisecond, 20, 600, 500, false},
		{"shedding at 0.8", shedding, 40 * time.Millisecond, 32, 400, 500, false},
		{"overload", overload, 40 * time.Millisecond, 32, 400, 500, false},
	} {
		q := newQueueController(10*ms, 0)
		q.mode = c.mode
		q.offer(int64(c.offered*float64(ms)), true)
		q.sumOffered, q.sumCapacity = c.sumOffered*float64(ms), c.sumCapacity*float64(ms)
		r := reading{t: int64(c.el), avgSlot: 10 * ms, slots: 1}
		if got := q.queuesUnjudged(r); got != c.want {
			t.Errorf("%s: leaves targets to the head %v, want %v", c.what, got, c.want)
		}
	}
}

// The standing queue's slot time per completion: measured in an interval
// whose queue stood above the target, net of the other classes' slot
// time on the same slots, and forgotten two intervals later.
func TestTheControllerMeasuresAStandingQueuesSlotTimePerCompletion(t *testing.T) {
	q := newQueueController(10*ms, 0)
	iv := int64(codelInterval)
	q.granted(30 * ms)
	r := reading{t: iv, avgSlot: 10 * ms, slots: 2, admitted: 1, completed: 8, others: 1 << Critical}
	r.used[Critical] = 40 * ms // 200 ms of the two slots less 40 of Critical's, over 8 completions
	q.endInterval(r)
	if got, ok := q.perCompletion(iv, iv); !ok || got != 20*ms {
		t.Fatalf("per completion %v (measured %v), want 20ms", time.Duration(got), ok)
	}
	if _, ok := q.perCompletion(iv+2*iv+1, iv); ok {
		t.Fatal("a measure older than two intervals was used")
	}
	q2 := newQueueController(10*ms, 0)
	q2.granted(5 * ms) // under the target: the queue did not stand
	q2.endInterval(reading{t: iv, avgSlot: 10 * ms, slots: 2, admitted: 1, completed: 8})
	if _, ok := q2.perCompletion(iv, iv); ok {
		t.Fatal("an interval under the target measured a standing queue")
	}
}

// An auto target follows the arrivals' latency targets within its
// bounds; a fixed one (ClassOptions.MaxQueueWait) is kept.
func TestTheControllersAutoTarget(t *testing.T) {
	q := newQueueController(0, 0)
	if !q.autoTarget(int64(time.Second), 10*ms) || q.target != 100*ms {
		t.Fatalf("1 s left, 10 ms slots: target %v, want a tenth of the time left", time.Duration(q.target))
	}
	if !q.autoTarget(100*ms, 40*ms) || q.target != 50*ms {
		t.Fatalf("100 ms left, 40 ms slots: target %v, want half the time left", time.Duration(q.target))
	}
	if !q.autoTarget(int64(time.Second), 60*ms) || q.target != 120*ms {
		t.Fatalf("1 s left, 60 ms slots: target %v, want two slot times", time.Duration(q.target))
	}
	f := newQueueController(7*ms, 0)
	if f.autoTarget(int64(time.Second), 10*ms) || f.target != 7*ms || f.auto {
		t.Fatalf("a fixed target was replaced: %v", time.Duration(f.target))
	}
	if intervalLen(10*ms) != int64(codelInterval) || intervalLen(80*ms) != 160*ms {
		t.Fatal("the interval is not 100 ms or two slot times if longer")
	}
}
