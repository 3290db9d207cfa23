package cgroupfs

import (
	"errors"
	"testing"
)

// Each fuzz target checks that a parser never panics and that every error
// it returns wraps ErrMalformed.

func checkErr(t *testing.T, err error) {
	t.Helper()
	if err != nil && !errors.Is(err, ErrMalformed) {
		t.Fatalf("error %v does not wrap ErrMalformed", err)
	}
}

func FuzzParseProcCgroup(f *testing.F) {
	for _, s := range []string{"0::/\n", "4:cpu,cpuacct:/docker/abc\n0::/x\n", "1:name=systemd:/a b\n", "4:cpu", "0::/../../init\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		lines, err := ParseProcCgroup(data)
		checkErr(t, err)
		for _, l := range lines {
			if l.Path == "" || l.Path[0] != '/' {
				t.Fatalf("accepted a relative path %q", l.Path)
			}
		}
	})
}

func FuzzParseMountInfo(f *testing.F) {
	for _, s := range []string{
		"32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct\n",
		"30 25 0:26 / /sys/fs/my\\040cgroup rw - cgroup2 cgroup2 rw\n",
		"30 25 0:26 / /sys/fs/cgr",
		"25 1 0:22 / / rw - ext4 /dev/root rw\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		mounts, err := ParseMountInfo(data)
		checkErr(t, err)
		if err == nil {
			lines, _ := ParseProcCgroup([]byte("0::/a\n4:cpu:/a\n"))
			FindCPU(lines, mounts) // must not panic
		}
	})
}

func FuzzUnescape(f *testing.F) {
	for _, s := range []string{`/a\040b`, `\`, `\04`, `\777`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		_, err := Unescape(s)
		checkErr(t, err)
	})
}

func FuzzParseCPUMax(f *testing.F) {
	for _, s := range []string{"max 100000\n", "125000 100000\n", "x", "1 -1", "99999999999999999999 1"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		q, err := ParseCPUMax(data)
		checkErr(t, err)
		if err == nil && (q.Period <= 0 || q.Cores() < 0) {
			t.Fatalf("accepted %+v", q)
		}
	})
}

func FuzzParseV1Quota(f *testing.F) {
	f.Add([]byte("125000\n"), []byte("100000\n"))
	f.Add([]byte("-1\n"), []byte("100000\n"))
	f.Add([]byte(""), []byte(""))
	f.Fuzz(func(t *testing.T, quota, period []byte) {
		q, err := ParseV1Quota(quota, period)
		checkErr(t, err)
		if err == nil && (q.Period <= 0 || q.Cores() < 0) {
			t.Fatalf("accepted %+v", q)
		}
	})
}

func FuzzParseCPUStat(f *testing.F) {
	f.Add([]byte("nr_periods 10\nnr_throttled 3\nthrottled_time 5000\n"))
	f.Add([]byte("usage_usec 7\nthrottled_usec 2\n"))
	f.Add([]byte("nr_periods"))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, err := ParseCPUStat(data)
		checkErr(t, err)
	})
}

func FuzzParseUint(f *testing.F) {
	f.Add([]byte("1024\n"))
	f.Add([]byte("-1"))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, err := ParseUint("cpu.shares", data)
		checkErr(t, err)
	})
}
