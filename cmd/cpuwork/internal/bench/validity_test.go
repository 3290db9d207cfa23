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
	// served is goodput / offered per level (50, 80, 110 %), shed the 503s.
	mk := func(served [3]float64, shed float64) *Scenario {
		s := &Scenario{Name: "service"}
		for i, l := range []float64{0.5, 0.8, 1.1} {
			v := &Variant{Name: []string{"pool@50%", "pool@80%", "pool@110%"}[i], Valid: true}
			v.Repeats = []Repeat{{Extra: map[string]float64{"goodput_per_s": served[i] * l * 100, "shed_share": shed, "cpu_share_of_slots": l}}}
			s.Variants = append(s.Variants, v)
		}
		return s
	}
	r := &Runner{}
	loads := []float64{0.5, 0.8, 1.1}
	cal := calibration{capacity: 100, cpuShare: 0.95}
	s := mk([3]float64{0.95, 0.9, 0.96}, 0)
	r.checkLoads(s, "pool", loads, cal)
	if s.Calibration != "" {
		t.Errorf("levels that keep up below and not above capacity refused: %s", s.Calibration)
	}
	s = mk([3]float64{0.95, 0.89, 0.9}, 0) // 80 % already an overload
	r.checkLoads(s, "pool", loads, cal)
	if !strings.Contains(s.Calibration, "at 80% pool served 89%") {
		t.Errorf("calibration %q", s.Calibration)
	}
	s = mk([3]float64{1, 1, 0.99}, 0) // 110 % served in full: no overload
	r.checkLoads(s, "pool", loads, cal)
	if !strings.Contains(s.Calibration, "underestimated") {
		t.Errorf("calibration %q", s.Calibration)
	}
	s = mk([3]float64{1, 1, 0.99}, 0.02) // 110 % served but shedding: an overload
	r.checkLoads(s, "pool", loads, cal)
	if s.Calibration != "" {
		t.Errorf("a shedding overload refused: %s", s.Calibration)
	}
	judge(s, []check{{label: "x", judged: "pool@50%", metric: "cpu_share_of_slots", limit: 1}})
	s.Calibration = "x"
	judge(s, []check{{label: "x", judged: "pool@50%", metric: "cpu_share_of_slots", limit: 1}})
	if s.Status != StatusNotJudged {
		t.Errorf("judged on a failed calibration: %q", s.Status)
	}
}
