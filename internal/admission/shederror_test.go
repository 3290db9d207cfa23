package admission

import (
	"errors"
	"testing"
	"time"
)

// A refusal keeps its numbers and writes its text only when read: the
// text of each rule is the one a caller has always read, with durations
// rounded to the microsecond.
func TestARefusalSaysItsRuleAndNumbersWhenRead(t *testing.T) {
	ms := int64(time.Millisecond)
	for _, c := range []struct {
		e    shedError
		want string
	}{
		{shedError{class: Interactive, rule: shedSpent},
			"cpuwork: interactive task shed: it sheds while the CPU budget is spent (the quota, not the slots, bounds the work): it holds no queue, and no slot was free"},
		{shedError{class: Batch, rule: shedStanding, target: 5 * ms, wait: 12*ms + 1234, held: 1},
			"cpuwork: batch task shed: its queue has stood above the queue-wait target 5ms for an interval (ClassOptions.MaxQueueWait) and its estimated wait is 12.001ms"},
		{shedError{class: Interactive, rule: shedStandingAuto, target: 33 * ms, wait: 70 * ms, held: 1},
			"cpuwork: interactive task shed: its queue has stood above the queue-wait target 33ms for an interval (2 slot times of the class, within 1/10 and 1/2 of the latency target; refused above 2 times it) and its estimated wait is 70ms"},
		{shedError{class: Interactive, rule: shedStandingAuto, target: 33 * ms, wait: 70 * ms, held: 0.5},
			"cpuwork: interactive task shed: its queue has stood above the queue-wait target 33ms for an interval (2 slot times of the class, within 1/10 and 1/2 of the latency target; refused above 2 times it, held at 0.5 of that while the slots stay busy without more queue) and its estimated wait is 70ms"},
		{shedError{class: Interactive, rule: shedBacklog, target: 10 * ms, wait: 25 * ms},
			"cpuwork: interactive task shed: its queue has stood above the queue-wait target 10ms for an interval and it has waited 25ms, more than 2 times the target"},
		{shedError{class: Critical, deadline: true, rule: shedNoLonger, left: 3*ms + 400, own: 4 * ms},
			"cpuwork: critical task shed: its latency target can no longer be met: 3ms left, expected run time 4ms"},
		{shedError{class: Interactive, deadline: true, rule: shedLate, left: 20 * ms, wait: 30 * ms, ahead: 7, own: 2 * ms},
			"cpuwork: interactive task shed: its latency target is in 20ms but the estimated queue wait is 30ms (7 tasks ahead) and its expected run time 2ms"},
	} {
		if got := c.e.Error(); got != c.want {
			t.Errorf("rule %d:\n got %s\nwant %s", c.e.rule, got, c.want)
		}
		if !errors.Is(&c.e, ErrSaturated) || errors.Is(&c.e, ErrDeadline) != c.e.deadline {
			t.Errorf("rule %d: wraps ErrSaturated %v, ErrDeadline %v (deadline %v)", c.e.rule, errors.Is(&c.e, ErrSaturated), errors.Is(&c.e, ErrDeadline), c.e.deadline)
		}
	}
}
