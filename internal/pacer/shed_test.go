package pacer

import (
	"testing"
	"time"
)

// While a class sheds the extra slot stays open, and the door hears the
// budget spent whenever the pacer would have closed it; a throttle in
// such a period teaches the pacer nothing (its target stays). Without a
// class shedding, the same load closes the slot: the case tells the two
// apart.
func TestWhileAClassShedsTheExtraSlotStaysOpenAndTheBudgetIsSpent(t *testing.T) {
	const period = 100 * time.Millisecond
	for _, shed := range []bool{false, true} {
		s := newSim(1.5, period, time.Millisecond)
		spent := false
		s.host.shed = func() bool { return shed }
		s.host.spent = func(b bool) { spent = spent || b }
		s.runPeriods(1.5, period, 20)
		closed := s.p.closedTotal > 0
		switch {
		case shed && closed:
			t.Errorf("a class shedding, the extra slot was closed %v of 2 s", time.Duration(s.p.closedTotal))
		case !shed && !closed:
			t.Error("no class shedding, two saturated slots under a 1.5-CPU quota never closed the extra slot: the case tells nothing")
		}
		if !spent {
			t.Errorf("shedding %v: the door was never told the budget spent", shed)
		}
		if shed && (s.p.target != fracTargetMax || s.p.held != 0 || s.p.lowered != 0) {
			t.Errorf("the throttles of the periods held open taught the pacer: target %v, held %d, lowered %d", s.p.target, s.p.held, s.p.lowered)
		}
		if shed && s.throttle == 0 {
			t.Error("two slots open under a 1.5-CPU quota for 20 periods were never throttled: the sim does not run them")
		}
	}
}
