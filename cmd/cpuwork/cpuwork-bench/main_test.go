package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/cpuwork/cpuwork/cmd/cpuwork/internal/bench"
)

// TestMain lets the test binary act as the cpuwork-bench binary (the
// bench re-executes itself for its load generator and child stages).
func TestMain(m *testing.M) {
	if os.Getenv("CPUWORK_AS_MAIN") == "1" {
		os.Args = append([]string{"cpuwork-bench"}, os.Args[1:]...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func asMain(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "CPUWORK_AS_MAIN=1")
	return cmd
}

func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := rootCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

// The exit-status contract (docs/guide.md): every usage error of the
// bench exits 2, cobra's own errors included.
func TestUsageErrorsExit2(t *testing.T) {
	cases := []struct {
		args []string
		want int
	}{
		{[]string{"--no-such-flag"}, 2},
		{[]string{"extra"}, 2},
		{[]string{"--repeat", "abc"}, 2},
		{[]string{"--repeat", "-1"}, 2},
		{[]string{"--duration", "-1s"}, 2},
		{[]string{"--duration", "1ns"}, 2},
		{[]string{"--loads", "0"}, 2},
		{[]string{"--quick", "--thorough"}, 2},
		{[]string{"--scenario", "nope"}, 2},
		{[]string{"--compete", "nope"}, 2},
	}
	for _, c := range cases {
		var stderr bytes.Buffer
		if got := execute(c.args, &stderr); got != c.want {
			t.Errorf("cpuwork bench %s: exit %d, want %d (%s)", strings.Join(c.args, " "), got, c.want, strings.TrimSpace(stderr.String()))
		}
	}
}

// Defect 8: a non-positive bench duration is an error.
func TestBenchRejectsNonPositiveDurations(t *testing.T) {
	for _, d := range []string{"-5s", "-1ns"} {
		if _, err := run(t, "--duration", d, "--scenario", "timers", "--out", ""); err == nil {
			t.Errorf("--duration %s accepted", d)
		}
	}
}

// Flags the bench refuses exit 2 before anything runs: an unknown
// variant (it once ran every variant), an --out that cannot be written
// (it once exited 1).
func TestBenchRefusesBadFlagsWithStatus2(t *testing.T) {
	for _, args := range [][]string{
		{"--no-setup", "--scenario", "timers", "--variants", "nosuch", "--out", ""},
		{"--no-setup", "--scenario", "timers", "--out", "/proc/version/report"},
	} {
		var stderr bytes.Buffer
		if code := execute(args, &stderr); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", args, code, stderr.String())
		}
	}
	var stderr bytes.Buffer
	if code := execute([]string{"--no-setup", "--scenario", "service", "--variants", "pool-503,cpuwork,pool-503-aa", "--repeat", "-1"}, &stderr); code != 2 || strings.Contains(stderr.String(), "--variants") {
		t.Errorf("known variants refused: exit %d: %s", code, stderr.String())
	}
}

// Item 4: the load generator's target must be on loopback after parsing
// and resolution, not by string prefix.
func TestLoadgenTargetsOnlyLoopback(t *testing.T) {
	for _, ok := range []string{"http://127.0.0.1:8080", "http://127.0.0.2:1", "http://localhost:8080", "http://[::1]:80"} {
		if err := loopbackTarget(ok); err != nil {
			t.Errorf("%s refused: %v", ok, err)
		}
	}
	for _, bad := range []string{
		"http://127.0.0.1@192.0.2.2:18081", // user info: the host is 192.0.2.2
		"http://127.evil.example:80",       // a name that starts like an IP
		"http://127.0.0.1.nip.io:80",
		"http://192.0.2.2:80",
		"http://user:pw@localhost:80",
		"https://127.0.0.1:443",
		"notaurl",
		"http://",
		"http://[::ffff:192.0.2.2]:80",
	} {
		if err := loopbackTarget(bad); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
	// The command refuses before sending anything.
	out, err := asMain("loadgen", "--target", "http://127.0.0.1@192.0.2.2:18081", "--rate", "1", "--duration", "1ms").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "user info") {
		t.Errorf("loadgen with user info: err %v, output %s", err, out)
	}
}

// bench.md's flag table says what the flags' definitions say: the
// --duration defaults and the pairs of --repeat and --thorough come from
// the bench's constants (they once disagreed: 20 vs 24 pairs, 3 to 10 vs
// 3 to 12, and two different duration defaults).
func TestBenchDocsTableMatchesTheFlags(t *testing.T) {
	b, err := os.ReadFile("../../../docs/bench.md")
	if err != nil {
		t.Fatal(err)
	}
	row := func(flag string) string {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "| `"+flag+"` |") {
				return l
			}
		}
		t.Fatalf("bench.md has no row for %s", flag)
		return ""
	}
	asNeeded, upTo := bench.PairsDefaults()
	for flag, want := range map[string]string{"--duration": bench.DurationDefaults(), "--repeat": asNeeded, "--thorough": upTo} {
		if r := row(flag); !strings.Contains(r, want) {
			t.Errorf("bench.md's %s row %q does not say %q", flag, r, want)
		}
	}
	bc := rootCmd()
	for flag, want := range map[string]string{"duration": bench.DurationDefaults(), "repeat": asNeeded, "thorough": upTo} {
		if u := bc.Flags().Lookup(flag).Usage; !strings.Contains(u, want) {
			t.Errorf("--%s's help %q does not say %q", flag, u, want)
		}
	}
}
