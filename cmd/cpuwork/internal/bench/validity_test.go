package bench

import (
	"strings"
	"testing"
	"time"
)

func TestValidityChecksFailWhereTheMeasurementWasNotMade(t *testing.T) {
	cases := []struct {
		name      string
		ok, bad   error
		wantInBad string
	}{
		{"canary", canaryValid(1000, time.Second), canaryValid(949, time.Second), "949 of 1000 marks"},
		{"echo", echoValid(10, 10), echoValid(9, 10), "9 of 10 echoes"},
		{"no echo sent", echoValid(1, 1), echoValid(0, 0), "0 of 0"},
		{"probe", probeValid(100, time.Second), probeValid(94, time.Second), "94 of its 100"},
		{"periods", periodsValid(1, "/g"), periodsValid(0, "/g"), "no CFS periods"},
		{"cpu", cpuValid(0.1, "child"), cpuValid(0, "child"), "CPU time not read"},
		{"rate", rateValid(99, 100), rateValid(98.9, 100), "98.9/s of 100.0/s"},
	}
	for _, c := range cases {
		if c.ok != nil {
			t.Errorf("%s: a valid run refused: %v", c.name, c.ok)
		}
		if c.bad == nil || !strings.Contains(c.bad.Error(), c.wantInBad) {
			t.Errorf("%s: got %v, want an error with %q", c.name, c.bad, c.wantInBad)
		}
	}
}

func TestLoadLevelsThatAreNotWhatTheySayAreNotJudged(t *testing.T) {
	mk := func(shares ...float64) *Scenario {
		s := &Scenario{Name: "service"}
		for i, l := range []float64{0.5, 0.8, 1.1} {
			v := &Variant{Name: []string{"pool@50%", "pool@80%", "pool@110%"}[i], Valid: true}
			v.Repeats = []Repeat{{Extra: map[string]float64{"cpu_share_of_slots": shares[i]}}}
			_ = l
			s.Variants = append(s.Variants, v)
		}
		return s
	}
	r := &Runner{}
	loads := []float64{0.5, 0.8, 1.1}
	s := mk(0.55, 0.94, 1.0)
	r.checkLoads(s, "pool", loads, calibration{capacity: 100, cpuShare: 0.95})
	if s.Calibration != "" {
		t.Errorf("levels within 10 points refused: %s", s.Calibration)
	}
	s = mk(0.5, 0.96, 1.0) // 80 % of capacity used 96 % of the CPU
	r.checkLoads(s, "pool", loads, calibration{capacity: 100, cpuShare: 0.95})
	if !strings.Contains(s.Calibration, "at 80% pool used 96%") {
		t.Errorf("calibration %q", s.Calibration)
	}
	s = mk(0.39, 0.8, 1.0) // a capacity underestimated: 50 % used 39 %
	r.checkLoads(s, "pool", loads, calibration{capacity: 100, cpuShare: 0.95})
	if !strings.Contains(s.Calibration, "at 50% pool used 39%") {
		t.Errorf("calibration %q", s.Calibration)
	}
	s = mk(0.5, 0.8, 1.0)
	r.checkLoads(s, "pool", loads, calibration{capacity: 100, cpuShare: 0.6})
	if !strings.Contains(s.Calibration, "not limited by the CPU") {
		t.Errorf("calibration %q", s.Calibration)
	}
	judge(s, []check{{label: "x", judged: "pool@50%", metric: "cpu_share_of_slots", limit: 1}})
	if s.Status != StatusNotJudged {
		t.Errorf("judged on a failed calibration: %q", s.Status)
	}
}
