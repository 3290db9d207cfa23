package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The README's second example on the checked-in small trace: every
// policy's rows and the comparison line.
func TestSimulateATrace(t *testing.T) {
	out, err := run(t, "simulate", "--trace", "testdata/simulate-small.csv", "--slots", "2", "--objective", "interactive=100ms")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"exact (a virtual clock", "interactive, cpuwork against the best other policy: goodput within the objective"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	rows := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 2 {
			rows[strings.Join(f[:2], " ")] = true
		}
	}
	for _, want := range []string{"cpuwork small", "goroutines large", "pool-503 batch", "semaphore all"} {
		if !rows[want] {
			t.Errorf("no row %q:\n%s", want, out)
		}
	}
	js, err := run(t, "simulate", "--trace", "testdata/simulate-small.csv", "--slots", "2", "--objective", "interactive=100ms", "--json", "--policies", "cpuwork,pool")
	if err != nil {
		t.Fatal(err)
	}
	var got []struct {
		Policies []struct {
			Policy string `json:"policy"`
			Kinds  []struct {
				Kind     string   `json:"kind"`
				Requests int      `json:"requests"`
				P99All   *float64 `json:"p99_all_s"`
			} `json:"kinds"`
		} `json:"policies"`
	}
	if err := json.Unmarshal([]byte(js), &got); err != nil {
		t.Fatalf("%v\n%s", err, js)
	}
	if len(got) != 1 || len(got[0].Policies) != 2 || got[0].Policies[1].Policy != "pool" || len(got[0].Policies[0].Kinds) != 3 {
		t.Fatalf("JSON shape: %s", js)
	}
	if k := got[0].Policies[0].Kinds[1]; k.Kind != "small" || k.Requests != 353 || k.P99All != nil {
		t.Errorf("cpuwork's small requests %+v: want 353, some refused (p99 of all null: never answered)", k)
	}
}

func TestSimulateTheScenarios(t *testing.T) {
	out, err := run(t, "simulate", "--scenario", "service,priority", "--load", "2", "--duration", "2s")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"# service at 200%: 2 slots, 2 s, arrivals from seed 1", "# priority: 2 slots", "critical, cpuwork against the best other policy"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	out, err = run(t, "simulate", "--scenario", "step", "--duration", "2s")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"# step from 80% to 140% at 1s", "# step from 80% to 300% at 1s", "after the step: served latency back under the objective", "cpuwork 0s"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestSimulateRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.csv")
	if err := os.WriteFile(bad, []byte("arrival_ms,class,cpu_ms\n0,urgent,1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"simulate", "--trace", bad}, 1, `line 2: class "urgent"`},
		{[]string{"simulate", "--trace", filepath.Join(dir, "none.csv")}, 1, "no such file"},
		{[]string{"simulate", "--scenario", "nope"}, 2, `no scenario "nope"`},
		{[]string{"simulate", "--load", "0"}, 2, "--load 0"},
		{[]string{"simulate", "--policies", "fifo"}, 2, `no policy "fifo"`},
		{[]string{"simulate", "--queue-limit", "0"}, 2, "--queue-limit 0"},
		{[]string{"simulate", "--slots", "4"}, 2, "for a --trace"},
		{[]string{"simulate", "--trace", bad, "--scenario", "service"}, 2, "--trace replays the file"},
		{[]string{"simulate", "--trace", bad, "--slots", "0"}, 2, "--slots 0"},
		{[]string{"simulate", "--trace", bad, "--objective", "interactive"}, 2, "want class=duration"},
		{[]string{"simulate", "--trace", bad, "--objective", "urgent=1s"}, 2, `class "urgent"`},
		{[]string{"simulate", "--trace", bad, "--objective", "batch=-1s"}, 2, "positive duration"},
		{[]string{"simulate", "--matrix", "--slots", "4"}, 2, "--slots does not apply"},
		{[]string{"simulate", "--matrix-file", filepath.Join(dir, "none.txt")}, 2, "no such file"},
		{[]string{"simulate", "--matrix-file", bad}, 2, "matrix line 1"},
	} {
		var stderr bytes.Buffer
		if got := execute(c.args, &stderr); got != c.code || !strings.Contains(stderr.String(), c.msg) {
			t.Errorf("cpuwork %s: exit %d (%s), want %d and %q", strings.Join(c.args, " "), got, strings.TrimSpace(stderr.String()), c.code, c.msg)
		}
	}
}

// A trace whose arrivals are out of order is replayed sorted by arrival,
// and says so with the first line out of order.
func TestSimulateSaysItSortedAnUnsortedTrace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "unsorted.csv")
	if err := os.WriteFile(path, []byte("arrival_ms,class,cpu_ms\n0,interactive,1\n5,interactive,1\n2,interactive,1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "simulate", "--trace", path, "--slots", "1", "--objective", "interactive=10ms")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out, "line 4 arrives before the line above it: replayed sorted by arrival") {
		t.Errorf("no note of the sort:\n%s", out)
	}
	sorted := filepath.Join(t.TempDir(), "sorted.csv")
	if err := os.WriteFile(sorted, []byte("arrival_ms,class,cpu_ms\n0,interactive,1\n2,interactive,1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, _ := run(t, "simulate", "--trace", sorted, "--slots", "1", "--objective", "interactive=10ms"); strings.Contains(out, "sorted by arrival") {
		t.Errorf("a sorted trace got the note:\n%s", out)
	}
}

// --matrix-file - prints the declared matrix, which parses.
func TestSimulatePrintsTheDeclaredMatrix(t *testing.T) {
	var out, stderr bytes.Buffer
	cmd := rootCmd()
	cmd.SetArgs([]string{"simulate", "--matrix-file", "-"})
	cmd.SetOut(&out)
	cmd.SetErr(&stderr)
	if err := cmd.Execute(); err != nil {
		t.Fatal(err, stderr.String())
	}
	if !strings.Contains(out.String(), "slots 1 2 4 8 16 32 64") || !strings.Contains(out.String(), "policies cpuwork cpuwork-target") {
		t.Errorf("--matrix-file - printed:\n%s", out.String())
	}
}

// simulate says what its "within objective" column counts and what
// "never" means, and its --help gives no "(default [])".
func TestSimulateSaysWhatItsColumnsMean(t *testing.T) {
	out, err := run(t, "simulate", "--scenario", "service", "--load", "2")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"# within objective: interactive served within 102.99ms of arrival", `("never": over 1 % were not)`} {
		if !strings.Contains(out, want) {
			t.Errorf("simulate's output lacks %q", want)
		}
	}
	help, _ := run(t, "simulate", "--help")
	if !strings.Contains(help, "--load") || strings.Contains(help, "(default [])") {
		t.Error("simulate --help says (default [])")
	}
}

// fidelityArgs is the simulation docs/results.md's fidelity table is
// printed from (docs/raw/fidelity-sim-2026-12-03.json.xz, whose JSON's
// sha256 is testdata/fidelity-sim.sha256): the default run's scenarios,
// the service and inference at loads 0.5 to 1.5 by 0.02 and 2, the
// bench's peers as the simulator models them.
func fidelityArgs() []string {
	loads := make([]string, 0, 52)
	for i := range 51 {
		loads = append(loads, strconv.FormatFloat(0.5+0.02*float64(i), 'f', 2, 64))
	}
	loads = append(loads, "2")
	return []string{"simulate", "--scenario", "service,inference,priority,burst,burst-long",
		"--load", strings.Join(loads, ","),
		"--policies", "cpuwork,goroutines,goroutines-yield,pool,semaphore,pool-503,sem-deadline", "--json"}
}

// The fidelity table's simulation is what this build replays: a change
// to the simulator or the admission code that moves it fails here until
// the raw file, its sha256 and the table are made again
// (`cpuwork simulate ARGS | xz -9 > docs/raw/...`, then
// scripts/fidelity-table.py).
func TestTheFidelitySimulationIsCurrent(t *testing.T) {
	out, err := run(t, fidelityArgs()...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	want, err := os.ReadFile("testdata/fidelity-sim.sha256")
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprintf("%x", sha256.Sum256([]byte(out))); got != strings.TrimSpace(string(want)) {
		t.Errorf("the fidelity simulation's JSON has sha256 %s, testdata/fidelity-sim.sha256 says %s: the simulator moved; make docs/raw/fidelity-sim-*.json.xz and the table in docs/results.md again", got, strings.TrimSpace(string(want)))
	}
}
