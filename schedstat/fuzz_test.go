package schedstat

import "testing"

// Fuzz targets for the /proc and PSI readers (issue 24).

func FuzzParseSchedstat(f *testing.F) {
	for _, s := range []string{"123456 7890 12\n", "1 2", "18446744073709551615 18446744073709551615 18446744073709551615", "a b c", ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		tt, err := parseSchedstat(b)
		if err == nil && (tt.OnCPU < 0 || tt.RunDelay < 0) {
			t.Errorf("%q: negative times %+v", b, tt)
		}
	})
}

func FuzzStatState(f *testing.F) {
	for _, s := range []string{"1 (sh) R 0", "1 (a) b) Z 0", "1 (x)", ")", "1 (x) "} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		statState(b) // never panics on any input
	})
}

func FuzzParsePressure(f *testing.F) {
	f.Add([]byte("some avg10=1.50 avg60=0.80 avg300=0.20 total=123456\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"))
	f.Add([]byte("some avg10=x total=-1"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, b []byte) {
		p := parsePressure("cpu.pressure", b)
		if p.SomeTotal < 0 {
			t.Errorf("%q: negative total %v", b, p.SomeTotal)
		}
		if !p.Available && p.Unreadable == "" {
			t.Errorf("%q: neither available nor a reason", b)
		}
	})
}
