package budget

import (
	"strings"
	"testing"
)

// Fuzz targets for the /proc readers of another process (issue 24).

func FuzzParseEnviron(f *testing.F) {
	f.Add([]byte("PATH=/bin\x00GOMAXPROCS=4\x00"), "GOMAXPROCS")
	f.Add([]byte("GOMAXPROCS=\x00GOMAXPROCS=2"), "GOMAXPROCS")
	f.Add([]byte("="), "")
	f.Fuzz(func(t *testing.T, data []byte, key string) {
		v := parseEnviron(data, key)
		if strings.Contains(v, "\x00") {
			t.Errorf("value %q spans entries", v)
		}
	})
}

func FuzzProcState(f *testing.F) {
	for _, s := range []string{"12 (sh) S 1", "12 (a) b) Z 1", "12 (x)", ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { procState(b) })
}
