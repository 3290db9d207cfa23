package sim

import (
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
)

// zeros is an endless stream of NUL bytes: /dev/zero.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// A trace reader is bounded: an endless input, a line past the bound, a
// field of many megabytes, a CPU time past the bound and more kinds
// than the bound are each refused with an error naming the line, quoting
// at most a short prefix of the field; a spreadsheet's UTF-8 BOM is
// taken.
func TestATraceIsReadWithinBounds(t *testing.T) {
	long := strings.Repeat("x", 300<<20) // 300 MB in one field
	var kinds strings.Builder
	kinds.WriteString("arrival_ms,class,cpu_ms,kind\n")
	for i := range MaxKinds + 1 {
		fmt.Fprintf(&kinds, "%d,interactive,1,k%d\n", i, i)
	}
	for _, c := range []struct {
		name string
		in   io.Reader
		want string
	}{
		{"/dev/zero", zeros{}, "line 1"},
		{"a long line", strings.NewReader("arrival_ms,class,cpu_ms\n0,interactive," + long + "\n"), "line 2"},
		{"a long kind", strings.NewReader("arrival_ms,class,cpu_ms,kind\n0,interactive,1," + strings.Repeat("k", 300) + "\n"), "line 2: kind"},
		{"a CPU time of 1e12 ms", strings.NewReader("arrival_ms,class,cpu_ms\n0,interactive,1e12\n"), "line 2: cpu_ms"},
		{"too many kinds", strings.NewReader(kinds.String()), fmt.Sprintf("line %d", MaxKinds+2)},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ReadCSV(c.in)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v: want an error naming %q", err, c.want)
			}
			if len(err.Error()) > 400 {
				t.Errorf("the error is %d bytes long: want the field quoted short", len(err.Error()))
			}
		})
	}
	reqs, err := ReadCSV(strings.NewReader("\ufeffarrival_ms,class,cpu_ms\n0,interactive,1\n"))
	if err != nil || len(reqs) != 1 {
		t.Errorf("a trace with a UTF-8 BOM: %d requests, %v; want it read", len(reqs), err)
	}
}

// A workload's slots are bounded as the executor's are, with an error.
func TestAWorkloadsSlotsAreBounded(t *testing.T) {
	wl := &Workload{Slots: 2_000_000_000, Duration: time.Second, Requests: []Request{{Class: 1, CPU: time.Millisecond}}}
	if err := wl.Validate(); err == nil || !strings.Contains(err.Error(), "slots") {
		t.Fatalf("2e9 slots: %v, want an error naming the slots", err)
	}
}

// The goroutines policy's cost does not grow with a request's CPU time:
// a request of 10^6 s (10^8 time slices) replays at once, alone and
// with another request waiting behind it for a while.
func TestAGoroutinesReplaysCostIsIndependentOfCPUTime(t *testing.T) {
	wl := &Workload{Slots: 1, Duration: time.Second, Requests: []Request{
		{Class: 1, CPU: 1e6 * time.Second},
		{At: time.Millisecond, Class: 1, CPU: 25 * time.Millisecond},
	}}
	start := time.Now()
	s, err := replay(wl, "goroutines")
	if err != nil {
		t.Fatal(err)
	}
	if s.seq > 100 {
		t.Errorf("%d events for two requests: want a handful, whatever their CPU time", s.seq)
	}
	if j := s.jobs[1]; j.end-j.arrival != int64(54*time.Millisecond) {
		t.Errorf("the short request took %v: want 54 ms (from 1 ms: 9 ms of the long one's slice, then its own 25 ms in slices of 10 ms between two more of the long one's)", time.Duration(j.end-j.arrival))
	}
	t.Logf("replayed in %v, %d events", time.Since(start), s.seq)
}
