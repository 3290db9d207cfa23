package main

import (
	"bytes"
	"encoding/json"
	"os"
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
