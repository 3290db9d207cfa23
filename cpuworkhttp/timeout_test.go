package cpuworkhttp

import (
	"testing"
	"time"
)

func TestTimeoutHeaderUnits(t *testing.T) {
	for _, tc := range []struct {
		v    string
		unit time.Duration
		want time.Duration
		ok   bool
	}{
		{"2", 0, 2 * time.Second, true},
		{"250", time.Millisecond, 250 * time.Millisecond, true}, // x-envoy-expected-rq-timeout-ms
		{"1.5s", time.Millisecond, 1500 * time.Millisecond, true},
		{"250ms", 0, 250 * time.Millisecond, true},
		{"0", 0, 0, false},
		{"-3", time.Millisecond, 0, false},
		{"soon", 0, 0, false},
		{"", 0, 0, false},
		{"9223372036854775807", time.Millisecond, 0, false},
	} {
		got, ok := parseTimeout(tc.v, tc.unit)
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseTimeout(%q, %v) = %v, %v; want %v, %v", tc.v, tc.unit, got, ok, tc.want, tc.ok)
		}
	}
}

// FuzzParseTimeout: a client's timeout header, whatever it holds, is a
// positive duration or ignored; never a panic.
func FuzzParseTimeout(f *testing.F) {
	for _, s := range []string{"2", "250ms", "1.5s", "-1", "0", "9223372036854775807", "1e9h", "soon"} {
		f.Add(s, int64(0))
		f.Add(s, int64(time.Millisecond))
	}
	f.Fuzz(func(t *testing.T, v string, unit int64) {
		d, ok := parseTimeout(v, time.Duration(unit))
		if ok != (d > 0) {
			t.Errorf("parseTimeout(%q, %d) = %v, %v", v, unit, d, ok)
		}
	})
}
