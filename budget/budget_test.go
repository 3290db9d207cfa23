package budget

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if runHelper() {
		return
	}
	goleak.VerifyTestMain(m)
}

func fixture(name string, gomaxprocs int, env string) *detector {
	return &detector{
		root:       filepath.Join("testdata", name),
		pid:        "self",
		affinity:   func() (int, error) { return 4, nil },
		numCPU:     4,
		gomaxprocs: gomaxprocs,
		env: func(k string) (string, error) {
			if k == "GOMAXPROCS" {
				return env, nil
			}
			return "", nil
		},
	}
}

func TestDetectFixtures(t *testing.T) {
	tests := []struct {
		name       string
		fixture    string
		env        string
		cores      float64
		leaf       float64
		source     Source
		version    int
		dir        string // CgroupDir relative to the fixture root
		runtime    int
		slots      int
		limits     int
		request    float64
		noteSubstr string
	}{
		{name: "v1 leaf quota of 1.25 cores gives 1.25 and the runtime picks 2", fixture: "v1",
			cores: 1.25, leaf: 1.25, source: SourceCgroupV1, version: 1, dir: "/sys/fs/cgroup/cpu,cpuacct/docker/abc",
			runtime: 2, slots: 1, limits: 1, request: 1.25},
		{name: "v1 inside a container reads the limit at the mount root", fixture: "v1-container",
			cores: 0.5, leaf: 0.5, source: SourceCgroupV1, version: 1, dir: "/sys/fs/cgroup/cpu,cpuacct",
			runtime: 2, slots: 1, limits: 1},
		{name: "v2 leaf quota of 1.5 cores", fixture: "v2",
			cores: 1.5, leaf: 1.5, source: SourceCgroupV2, version: 2, dir: "/sys/fs/cgroup/kubepods.slice/pod1/c1",
			runtime: 2, slots: 1, limits: 1, request: 1.5},
		{name: "v2 unlimited leaf under a 0.5-core parent gives 0.5 while the runtime sees no limit", fixture: "v2-nested",
			cores: 0.5, leaf: 0, source: SourceCgroupV2, version: 2, dir: "/sys/fs/cgroup/system.slice/app.service/worker",
			runtime: 4, slots: 1, limits: 2},
		{name: "hybrid host uses the v1 hierarchy that holds cpu", fixture: "hybrid",
			cores: 2, leaf: 2, source: SourceCgroupV1, version: 1, dir: "/sys/fs/cgroup/cpu,cpuacct/user.slice",
			runtime: 2, slots: 2, limits: 1},
		{name: "hybrid host without cpu in v1 uses the v2 hierarchy", fixture: "hybrid-v2cpu",
			cores: 0.75, leaf: 0.75, source: SourceCgroupV2, version: 2, dir: "/sys/fs/cgroup/unified/app",
			runtime: 2, slots: 1, limits: 1},
		{name: "no limit falls back to the affinity mask", fixture: "nolimit",
			cores: 4, source: SourceAffinity, version: 2, dir: "/sys/fs/cgroup", runtime: 4, slots: 4},
		{name: "no cgroup files falls back to the affinity mask", fixture: "nocgroup",
			cores: 4, source: SourceAffinity, runtime: 4, slots: 4, noteSubstr: "no cgroups"},
		{name: "cgroup namespace root reads the namespace's own limit", fixture: "cgroupns",
			cores: 1, leaf: 1, source: SourceCgroupV2, version: 2, dir: "/sys/fs/cgroup", runtime: 2, slots: 1, limits: 1},
		{name: "cgroup outside the namespace is reported as not visible", fixture: "cgroupns-outside",
			cores: 4, source: SourceAffinity, version: 2, runtime: 4, slots: 4, noteSubstr: "not visible"},
		{name: "escaped mount point and a path with a space resolve", fixture: "escaped",
			cores: 2.5, leaf: 2.5, source: SourceCgroupV2, version: 2, dir: "/sys/fs/my cgroup/my app.slice", runtime: 3, slots: 2, limits: 1},
		{name: "GOMAXPROCS variable overrides the runtime default", fixture: "v1", env: "7",
			cores: 1.25, leaf: 1.25, source: SourceCgroupV1, version: 1, dir: "/sys/fs/cgroup/cpu,cpuacct/docker/abc",
			runtime: 7, slots: 1, limits: 1, request: 1.25},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := fixture(tt.fixture, 4, tt.env).detect()
			if err != nil {
				t.Fatalf("detect: %v", err)
			}
			if b.Cores != tt.cores || b.LeafCores != tt.leaf || b.Source != tt.source || b.CgroupVersion != tt.version {
				t.Errorf("got cores %v leaf %v source %q v%d; want %v %v %q v%d",
					b.Cores, b.LeafCores, b.Source, b.CgroupVersion, tt.cores, tt.leaf, tt.source, tt.version)
			}
			wantDir := ""
			if tt.dir != "" {
				wantDir = filepath.Join("testdata", tt.fixture) + tt.dir
			}
			if got := filepath.Join("testdata", tt.fixture) + strings.TrimPrefix(b.CgroupDir, filepath.Join("testdata", tt.fixture)); b.CgroupDir != "" && got != wantDir || b.CgroupDir == "" && wantDir != "" {
				t.Errorf("CgroupDir %q, want %q", b.CgroupDir, wantDir)
			}
			if b.RuntimeGOMAXPROCS != tt.runtime {
				t.Errorf("RuntimeGOMAXPROCS %d, want %d", b.RuntimeGOMAXPROCS, tt.runtime)
			}
			if b.Slots() != tt.slots {
				t.Errorf("Slots %d, want %d", b.Slots(), tt.slots)
			}
			if len(b.Limits) != tt.limits {
				t.Errorf("%d limits %+v, want %d", len(b.Limits), b.Limits, tt.limits)
			}
			if diff := b.RequestCores - tt.request; diff > 0.02 || diff < -0.02 { // v2 weight is a lossy integer image of shares
				t.Errorf("RequestCores %v, want %v", b.RequestCores, tt.request)
			}
			if tt.noteSubstr != "" && !strings.Contains(strings.Join(b.Notes, "\n"), tt.noteSubstr) {
				t.Errorf("notes %q lack %q", b.Notes, tt.noteSubstr)
			}
		})
	}
}

// A limit file the Go runtime cannot parse makes the runtime ignore that
// limit (GOROOT/src/runtime/cgroup_linux.go: adjustCgroupGOMAXPROCS skips
// on error); Detect does the same, and says so in a note naming the file.
func TestDetectIgnoresAMalformedLimitWithANote(t *testing.T) {
	tests := []struct{ fixture, file string }{
		{"malformed-cpumax", "cpu.max"},
		{"malformed-quota", "cpu,cpuacct/a"},
		{"empty-period", "cpu/a"},
		{"period-zero", "cpu/a"},
		{"quota-maxint", "cpu/a"},
	}
	for _, tt := range tests {
		t.Run(tt.fixture+" is ignored with a note naming "+tt.file, func(t *testing.T) {
			b, err := fixture(tt.fixture, 4, "").detect()
			if err != nil {
				t.Fatalf("Detect failed where the runtime falls back: %v", err)
			}
			if len(b.Limits) != 0 || b.Source != SourceAffinity || b.Cores != 4 {
				t.Errorf("limits %+v, source %s, cores %v: want the limit ignored", b.Limits, b.Source, b.Cores)
			}
			notes := strings.Join(b.Notes, "\n")
			if !strings.Contains(notes, tt.file) || !strings.Contains(notes, "ignored") {
				t.Errorf("notes %q do not name %q as ignored", notes, tt.file)
			}
		})
	}
}

func TestRuntimeDefaultIgnoresAGOMAXPROCSTheRuntimeIgnores(t *testing.T) {
	for env, want := range map[string]int{"3": 3, "99999999999": 4, "-1": 4, "x": 4, "2147483647": 2147483647} {
		b, err := fixture("nolimit", 4, env).detect()
		if err != nil {
			t.Fatal(err)
		}
		if b.RuntimeGOMAXPROCS != want {
			t.Errorf("GOMAXPROCS=%s: RuntimeGOMAXPROCS %d, want %d (the runtime parses it as a positive int32)", env, b.RuntimeGOMAXPROCS, want)
		}
	}
}

func TestDetectMalformedFilesNameTheFile(t *testing.T) {
	tests := []struct{ fixture, file string }{
		{"truncated-cgroup", "/proc/self/cgroup"},
		{"truncated-mountinfo", "/proc/self/mountinfo"},
	}
	for _, tt := range tests {
		t.Run(tt.fixture+" is an error naming "+tt.file, func(t *testing.T) {
			_, err := fixture(tt.fixture, 4, "").detect()
			if err == nil {
				t.Fatal("no error")
			}
			if !errors.Is(err, ErrMalformed) {
				t.Errorf("error %v does not wrap ErrMalformed", err)
			}
			if !strings.Contains(err.Error(), tt.file) {
				t.Errorf("error %q does not name %q", err, tt.file)
			}
		})
	}
}

func TestWarningWhenGOMAXPROCSExceedsQuota(t *testing.T) {
	b, err := fixture("v1", 2, "").detect()
	if err != nil {
		t.Fatal(err)
	}
	if w := b.Warning(); !strings.Contains(w, "GOMAXPROCS is 2") || !strings.Contains(w, "1.25") {
		t.Errorf("warning %q", w)
	}
	b, err = fixture("v1", 1, "").detect()
	if err != nil {
		t.Fatal(err)
	}
	if w := b.Warning(); w != "" {
		t.Errorf("GOMAXPROCS 1 under 1.25 cores warned %q", w)
	}
	if b.Slots() != 1 {
		t.Errorf("slots %d", b.Slots())
	}
}

func TestReadStatDir(t *testing.T) {
	s, err := ReadStatDir("testdata/v1/sys/fs/cgroup/cpu,cpuacct/docker/abc")
	if err != nil {
		t.Fatal(err)
	}
	if s.Periods != 43 || s.ThrottledPeriods != 36 || s.ThrottledTime != 1234567890*time.Nanosecond {
		t.Errorf("v1 stat %+v", s)
	}
	s, err = ReadStatDir("testdata/v2/sys/fs/cgroup/kubepods.slice/pod1/c1")
	if err != nil {
		t.Fatal(err)
	}
	if s.Periods != 100 || s.ThrottledPeriods != 7 || s.ThrottledTime != 350*time.Millisecond || s.Usage != 5*time.Second {
		t.Errorf("v2 stat %+v", s)
	}
	if _, err := ReadStatDir(""); err == nil {
		t.Error("empty dir: no error")
	}
}

func TestDetectSelfWorksOnThisHost(t *testing.T) {
	b, err := Detect()
	if err != nil {
		t.Fatal(err)
	}
	if b.Cores <= 0 || b.Affinity <= 0 || b.GOMAXPROCS <= 0 || b.Slots() < 1 {
		t.Errorf("implausible budget %+v", b)
	}
	if b.Cores > float64(b.Affinity) {
		t.Errorf("cores %v above affinity %d", b.Cores, b.Affinity)
	}
}

func TestDetectPIDRejectsBadPID(t *testing.T) {
	if _, err := DetectPID(0); err == nil {
		t.Error("pid 0: no error")
	}
}

func TestWatchReportsFirstReadingThenOnlyChanges(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cores := make(chan float64, 10)
	for _, c := range []float64{1, 1, 1, 2} {
		cores <- c
	}
	last := 2.0
	detect := func() (Budget, error) {
		select {
		case c := <-cores:
			last = c
		default:
		}
		return Budget{Cores: last}, nil
	}
	ch := WatchFunc(ctx, time.Millisecond, detect)
	first := <-ch
	if first.Budget.Cores != 1 {
		t.Fatalf("first %v", first.Budget.Cores)
	}
	second := <-ch
	if second.Budget.Cores != 2 {
		t.Fatalf("second %v, want the change to 2", second.Budget.Cores)
	}
	cancel()
	for range ch { // drains, and ends because the channel closes
	}
}

// Issue 24: a zombie PID is said to be one, not "invalid argument" from
// sched_getaffinity.
func TestDetectPIDOfAZombieSaysSo(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Skip("cannot start true:", err)
	}
	defer cmd.Wait()
	// Not waited for: once it exits it stays a zombie until Wait.
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
		if procState(st) == 'Z' {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d never became a zombie: %q", cmd.Process.Pid, st)
		}
		time.Sleep(5 * time.Millisecond)
	}
	_, err := DetectPID(cmd.Process.Pid)
	if err == nil || !strings.Contains(err.Error(), "zombie") {
		t.Errorf("DetectPID of a zombie: %v", err)
	}
}

func TestProcStateReadsTheFieldAfterTheLastParenthesis(t *testing.T) {
	for in, want := range map[string]byte{
		"12 (sh) S 1 2":        'S',
		"12 (a) b) Z 1":        'Z',
		"12 (x)":               0,
		"garbage":              0,
		"12 (sleep) R 1 2 3 4": 'R',
		"":                     0,
		"1 ()":                 0,
	} {
		if got := procState([]byte(in)); got != want {
			t.Errorf("procState(%q) = %q, want %q", in, got, want)
		}
	}
}

// Issue 22: a containerised target seen from the host names its cgroup
// files in its own mount namespace; they are read through /proc/PID/root,
// not the host's /sys/fs/cgroup (whose root has no quota).
func TestATargetInAnotherMountNamespaceIsReadThroughItsRoot(t *testing.T) {
	d := fixture("container-from-host", 4, "")
	b, err := d.detect()
	if err != nil {
		t.Fatal(err)
	}
	if b.Cores != 4 {
		t.Fatalf("without the namespace root: %v cores, want the host's 4 (the fixture's host root has no quota)", b.Cores)
	}
	d = fixture("container-from-host", 4, "")
	d.nsRoot = "/proc/self/root"
	b, err = d.detect()
	if err != nil {
		t.Fatal(err)
	}
	if b.Cores != 1.5 || !strings.HasPrefix(b.SourceDir, "/proc/self/root/") {
		t.Errorf("through the namespace root: %v cores from %q, want 1.5 from /proc/self/root/sys/fs/cgroup", b.Cores, b.SourceDir)
	}
}

// Another process's environ that cannot be read leaves the variable
// unknown, with the reason, never "unset".
func TestAnUnreadableEnvironIsUnknownNotUnset(t *testing.T) {
	d := fixture("v1", 0, "")
	d.env = func(string) (string, error) { return "", os.ErrPermission }
	b, err := d.detect()
	if err != nil {
		t.Fatal(err)
	}
	if b.GOMAXPROCSEnvUnknown == "" || b.GOMAXPROCSEnv != "" {
		t.Errorf("env %q unknown %q: want unknown with the reason", b.GOMAXPROCSEnv, b.GOMAXPROCSEnvUnknown)
	}
}

// A quota file that is listed but cannot be read is an unknown quota,
// never "no quota".
func TestAnUnreadableQuotaIsUnknown(t *testing.T) {
	d := fixture("v2", 4, "")
	d.readFile = func(p string) ([]byte, error) {
		if filepath.Base(p) == "cpu.max" {
			return nil, &fs.PathError{Op: "open", Path: p, Err: fs.ErrPermission}
		}
		return os.ReadFile(p)
	}
	b, err := d.detect()
	if err != nil {
		t.Fatal(err)
	}
	if b.QuotaUnknown == "" || len(b.Limits) != 0 {
		t.Errorf("QuotaUnknown %q, Limits %v: want the quota unknown", b.QuotaUnknown, b.Limits)
	}
}
