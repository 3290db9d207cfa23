package cgroupfs

import (
	"errors"
	"math"
	"testing"
	"time"
)

func TestFindCPU(t *testing.T) {
	v1 := []Mount{{FSType: "cgroup", Root: "/", MountPoint: "/sys/fs/cgroup/cpu", SuperOptions: []string{"rw", "cpu", "cpuacct"}}}
	v2 := []Mount{{FSType: "cgroup2", Root: "/", MountPoint: "/sys/fs/cgroup"}}
	tests := []struct {
		name   string
		lines  []CgroupLine
		mounts []Mount
		dir    string
		err    error
	}{
		{"v1 path joins the mount point", []CgroupLine{{ID: 3, Controllers: []string{"cpu", "cpuacct"}, Path: "/a/b"}}, v1, "/sys/fs/cgroup/cpu/a/b", nil},
		{"v2 root path is the mount point", []CgroupLine{{ID: 0, Path: "/"}}, v2, "/sys/fs/cgroup", nil},
		{"v1 cpu wins over v2 listed first", []CgroupLine{{ID: 0, Path: "/x"}, {ID: 2, Controllers: []string{"cpu"}, Path: "/y"}}, append(v2, v1...), "/sys/fs/cgroup/cpu/y", nil},
		{"mount root strips its prefix", []CgroupLine{{ID: 0, Path: "/pod/c"}}, []Mount{{FSType: "cgroup2", Root: "/pod", MountPoint: "/cg"}}, "/cg/c", nil},
		{"mount root that is only a string prefix does not match", []CgroupLine{{ID: 0, Path: "/podx/c"}}, []Mount{{FSType: "cgroup2", Root: "/pod", MountPoint: "/cg"}}, "", ErrNotVisible},
		{"path outside the namespace is not visible", []CgroupLine{{ID: 0, Path: "/../init"}}, v2, "", ErrNotVisible},
		{"no cpu hierarchy", []CgroupLine{{ID: 4, Controllers: []string{"memory"}, Path: "/"}}, v1, "", ErrNoCgroup},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := FindCPU(tt.lines, tt.mounts)
			if !errors.Is(err, tt.err) {
				t.Fatalf("err %v, want %v", err, tt.err)
			}
			if h.Dir != tt.dir {
				t.Errorf("dir %q, want %q", h.Dir, tt.dir)
			}
		})
	}
}

func TestAncestorsStopAtTheMountPoint(t *testing.T) {
	got := Ancestors("/sys/fs/cgroup/a/b", "/sys/fs/cgroup")
	want := []string{"/sys/fs/cgroup/a/b", "/sys/fs/cgroup/a", "/sys/fs/cgroup"}
	if len(got) != len(want) {
		t.Fatalf("%q", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("%q", got)
		}
	}
}

func TestParseQuotaFiles(t *testing.T) {
	tests := []struct {
		name  string
		parse func() (Quota, error)
		cores float64
		bad   bool
	}{
		{"v2 limit", func() (Quota, error) { return ParseCPUMax([]byte("125000 100000\n")) }, 1.25, false},
		{"v2 max is unlimited", func() (Quota, error) { return ParseCPUMax([]byte("max 100000\n")) }, 0, false},
		{"v2 missing period", func() (Quota, error) { return ParseCPUMax([]byte("max")) }, 0, true},
		{"v2 zero period", func() (Quota, error) { return ParseCPUMax([]byte("1000 0")) }, 0, true},
		{"v1 limit", func() (Quota, error) { return ParseV1Quota([]byte("50000\n"), []byte("100000\n")) }, 0.5, false},
		{"v1 -1 is unlimited", func() (Quota, error) { return ParseV1Quota([]byte("-1\n"), []byte("100000\n")) }, 0, false},
		{"v1 text quota", func() (Quota, error) { return ParseV1Quota([]byte("x"), []byte("100000")) }, 0, true},
		{"v1 empty period", func() (Quota, error) { return ParseV1Quota([]byte("1"), nil) }, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, err := tt.parse()
			if tt.bad {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("err %v, want ErrMalformed", err)
				}
				return
			}
			if err != nil || q.Cores() != tt.cores {
				t.Fatalf("cores %v err %v, want %v", q.Cores(), err, tt.cores)
			}
		})
	}
}

func TestParseCPUStatV1AndV2(t *testing.T) {
	s, err := ParseCPUStat([]byte("nr_periods 10\nnr_throttled 3\nthrottled_time 5000\n"))
	if err != nil || s.Periods != 10 || s.ThrottledPeriods != 3 || s.ThrottledTime != 5000 {
		t.Errorf("v1 %+v %v", s, err)
	}
	s, err = ParseCPUStat([]byte("usage_usec 7\nnr_periods 1\nnr_throttled 1\nthrottled_usec 2\n"))
	if err != nil || s.Usage != 7*time.Microsecond || s.ThrottledTime != 2*time.Microsecond {
		t.Errorf("v2 %+v %v", s, err)
	}
	if _, err := ParseCPUStat([]byte("nr_periods\n")); !errors.Is(err, ErrMalformed) {
		t.Errorf("truncated line: %v", err)
	}
}

func TestUnescape(t *testing.T) {
	got, err := Unescape(`/a\040b\134c`)
	if err != nil || got != `/a b\c` {
		t.Errorf("%q %v", got, err)
	}
	for _, bad := range []string{`/a\04`, `/a\9zz`, `\`} {
		if _, err := Unescape(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func TestParseCPUStatSaturatesHugeCounters(t *testing.T) {
	s, err := ParseCPUStat([]byte("nr_periods 1\nnr_throttled 1\nthrottled_time 18446744073709551615\nusage_usec 18446744073709551615\n"))
	if err != nil {
		t.Fatal(err)
	}
	if s.ThrottledTime < 0 || s.Usage < 0 {
		t.Fatalf("counters wrapped negative: %+v", s)
	}
	if s.ThrottledTime != time.Duration(math.MaxInt64) || s.Usage != time.Duration(math.MaxInt64) {
		t.Errorf("want saturation at MaxInt64: %+v", s)
	}
}

// The kernel separates mountinfo fields with ' ' and escapes only ' ',
// '\t', '\n' and '\\' (show_path): '\v', '\f' and '\r' stay in paths.
func TestMountInfoKeepsUnescapedControlCharacters(t *testing.T) {
	line := "25 21 0:22 / /sys/fs/cgroup/a\vb\fc\rd rw,nosuid - cgroup2 cgroup2 rw\n"
	ms, err := ParseMountInfo([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 1 || ms[0].MountPoint != "/sys/fs/cgroup/a\vb\fc\rd" {
		t.Fatalf("mounts %+v", ms)
	}
}
