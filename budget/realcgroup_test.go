package budget

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

const v1CPU = "/sys/fs/cgroup/cpu"

// TestRealCgroupV1NestedLimit creates a v1 cpu cgroup with a 1.25-core quota
// and an unlimited child, runs a helper process in the child and checks the
// helper reports 1.25 cores from the parent's limit.
func TestRealCgroupV1NestedLimit(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create cgroups")
	}
	if _, err := os.Stat(filepath.Join(v1CPU, "cpu.cfs_quota_us")); err != nil {
		t.Skipf("no writable cgroup v1 cpu controller at %s: %v", v1CPU, err)
	}
	parent := filepath.Join(v1CPU, fmt.Sprintf("cpuwork-test-budget-%d", os.Getpid()))
	if err := os.Mkdir(parent, 0o755); err != nil {
		if errors.Is(err, fs.ErrPermission) || errors.Is(err, os.ErrExist) {
			t.Skipf("cannot create %s: %v", parent, err)
		}
		t.Fatal(err)
	}
	child := filepath.Join(parent, "inner")
	t.Cleanup(func() {
		os.Remove(child)
		if err := os.Remove(parent); err != nil {
			t.Errorf("cleanup %s: %v", parent, err)
		}
	})
	write := func(p, v string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			t.Fatalf("write %s: %v", p, err)
		}
	}
	write(filepath.Join(parent, "cpu.cfs_period_us"), "100000")
	write(filepath.Join(parent, "cpu.cfs_quota_us"), "125000")
	if err := os.Mkdir(child, 0o755); err != nil {
		t.Fatal(err)
	}

	// The shell moves itself into the child, then execs the helper, so the
	// helper's Detect runs inside the child from its first instruction.
	script := `echo $$ > "$1/cgroup.procs" && exec "$2" -test.run='^$'`
	cmd := exec.Command("/bin/sh", "-c", script, "sh", child, os.Args[0])
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	cmd.Stderr = os.Stderr
	data, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper: %v", err)
	}
	var b Budget
	if err := json.Unmarshal(data, &b); err != nil {
		t.Fatalf("helper output %q: %v", data, err)
	}
	if b.CgroupDir != child {
		t.Errorf("helper ran in %s, want %s", b.CgroupDir, child)
	}
	if b.Cores != 1.25 || b.LeafCores != 0 || b.SourceDir != parent || b.Source != SourceCgroupV1 {
		t.Errorf("helper budget: cores %v leaf %v from %q (%s); want 1.25 from the parent %s",
			b.Cores, b.LeafCores, b.SourceDir, b.Source, parent)
	}
	if b.Slots() != 1 {
		t.Errorf("slots %d, want 1", b.Slots())
	}
}
