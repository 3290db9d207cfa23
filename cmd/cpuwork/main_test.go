package main

import (
	"bytes"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
)

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

func TestBudgetTablePrintsTheBudgetAndSlots(t *testing.T) {
	out, err := run(t, "budget")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"budget", "affinity", "GOMAXPROCS", "runtime default", "cpuwork slots"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestBudgetJSONHasCoresAndSlots(t *testing.T) {
	out, err := run(t, "budget", "--json", "--pid", "1")
	if err != nil {
		t.Skipf("cannot inspect pid 1 here: %v", err)
	}
	var r map[string]any
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if r["cores"].(float64) <= 0 || r["slots"].(float64) < 1 || int(r["pid"].(float64)) != 1 {
		t.Errorf("report %v", r)
	}
	out, err = run(t, "budget", "--json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil || int(r["pid"].(float64)) != os.Getpid() {
		t.Errorf("self report %v %v", r, err)
	}
}

func TestBudgetRejectsBadPIDAndArguments(t *testing.T) {
	if _, err := run(t, "budget", "--pid", "-3"); err == nil {
		t.Error("negative pid accepted")
	}
	if _, err := run(t, "budget", "extra"); err == nil {
		t.Error("positional argument accepted")
	}
}

// The exit-status contract: every usage error exits 2, in every
// subcommand, cobra's own errors included; run, whose status is CMD's,
// exits 125 for its own failures, usage included.
func TestUsageErrorsExit2EverywhereAndRunsOwnFailures125(t *testing.T) {
	cases := []struct {
		args []string
		want int
	}{
		{[]string{"no-such-command"}, 2},
		{[]string{"--no-such-flag"}, 2},
		{[]string{"budget", "--pid", "-3"}, 2},
		{[]string{"budget", "extra"}, 2},
		{[]string{"budget", "--pid", "x"}, 2},
		{[]string{"doctor"}, 2},
		{[]string{"doctor", "--pid", "-3"}, 2},
		{[]string{"doctor", "--pid", "1", "--duration", "0s"}, 2},
		{[]string{"doctor", "--pid", "1", "--url", "ftp://x"}, 2},
		{[]string{"doctor", "extra", "--pid", "1"}, 2},
		{[]string{"run"}, 125},
		{[]string{"run", "--no-such-flag", "--", "true"}, 125},
		{[]string{"run", "--cpus", "-1", "--", "true"}, 125},
		{[]string{"run", "--", "/no/such/command"}, 127},
	}
	for _, c := range cases {
		var stderr bytes.Buffer
		if got := execute(c.args, &stderr); got != c.want {
			t.Errorf("cpuwork %s: exit %d, want %d (%s)", strings.Join(c.args, " "), got, c.want, strings.TrimSpace(stderr.String()))
		}
	}
}

// The doctor's first words to a newcomer: without --pid it says --pid is
// required (not that 0 is no process ID); a PID with no process is said
// so, not as a raw /proc error.
func TestTheDoctorSaysWhatIsMissingInPlainWords(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"doctor"}, "--pid is required"},
		{[]string{"doctor", "--pid", "4194303", "--duration", "100ms"}, "no process 4194303"},
	} {
		var stderr bytes.Buffer
		execute(c.args, &stderr)
		if got := stderr.String(); !strings.Contains(got, c.want) || strings.Contains(got, "/proc/") {
			t.Errorf("cpuwork %s: %q; want it to say %q, with no /proc path", strings.Join(c.args, " "), strings.TrimSpace(got), c.want)
		}
	}
}

// doctor --prove on an idle Go program, without --url, exits as doctor
// does for the same view: 5, nothing found in the OS view (was 0).
func TestProveExitsAsTheDoctorForNothingFoundInTheOSView(t *testing.T) {
	if testing.Short() {
		t.Skip("a 6-s diagnosis")
	}
	t.Setenv("CPUWORK_AS_MAIN", "1") // the child: this binary as cpuwork, idle for 20 s
	var stderr bytes.Buffer
	code := execute([]string{"doctor", "--prove", "--", os.Args[0], "doctor", "--pid", strconv.Itoa(os.Getpid()), "--duration", "20s"}, &stderr)
	if code != 5 {
		t.Errorf("exit %d, want 5 (%s)", code, strings.TrimSpace(stderr.String()))
	}
}
