package account

import "testing"

func TestPartNamesAreThePromLabels(t *testing.T) {
	want := []string{"queue_wait", "on_cpu", "kernel_run_queue", "throttled", "go_run_queue", "gc", "other"}
	for p := range Part(NumParts) {
		if got := p.String(); got != want[p] {
			t.Errorf("Part(%d) = %q, want %q", p, got, want[p])
		}
	}
	if got := Part(NumParts).String(); got != "part(?)" {
		t.Errorf("an invalid part prints %q", got)
	}
}
