package bench

import (
	"math"
	"testing"
	"time"
)

// stepTime reads the step from the per-window calls: the large
// replica's share before the neighbour starts, then the first two
// windows in a row under halfway to a third.
func TestFleetStepTimeFromWindows(t *testing.T) {
	w := [][2]int{{5, 10}, {5, 10}, {5, 10}, {5, 10}, // 0.5 before
		{5, 10}, {4, 10}, {3, 10}, {4, 10}, {3, 10}, {3, 10}} // halfway: 0.417
	if got := stepTime(w, 4, 250*time.Millisecond); got != 0.5 {
		t.Errorf("stepTime = %v, want 0.5 (windows 5 and 6 under the midpoint, read to the end of 5)", got)
	}
	if got := stepTime(w[:6], 4, 250*time.Millisecond); !math.IsNaN(got) {
		t.Errorf("a share that never falls: %v, want NaN", got)
	}
	if got := stepTime([][2]int{{0, 0}, {1, 2}}, 1, time.Second); !math.IsNaN(got) {
		t.Errorf("no calls before the step: %v, want NaN", got)
	}
}
