package doctor

import (
	"bytes"
	rpprof "runtime/pprof"
	rtrace "runtime/trace"
	"sync"
	"testing"
	"time"
)

// Fuzz targets for the readers of what a target's net/http/pprof serves
// (issue 24): an execution trace and a CPU profile, whole, truncated (a
// target that stops answering mid-transfer) and mutated. They must return
// an error or a view, never panic or hang.

// busy runs two goroutines for d while f records.
func busy(d time.Duration) {
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for end := time.Now().Add(d); time.Now().Before(end); {
				sink.Add(1)
			}
		}()
	}
	wg.Wait()
}

// seeds adds b and its truncations at a tenth, a half and nine tenths.
func seeds(f *testing.F, b []byte) {
	f.Add(b)
	for _, n := range []int{len(b) / 10, len(b) / 2, len(b) * 9 / 10} {
		f.Add(b[:n])
	}
}

func FuzzReadTrace(f *testing.F) {
	var buf bytes.Buffer
	if err := rtrace.Start(&buf); err == nil {
		busy(20 * time.Millisecond)
		rtrace.Stop()
		seeds(f, buf.Bytes())
	}
	f.Add([]byte("go 1.26 trace\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := readTrace(bytes.NewReader(b))
		if err == nil && v == nil {
			t.Error("no error and no view")
		}
	})
}

func FuzzReadProfile(f *testing.F) {
	var buf bytes.Buffer
	if err := rpprof.StartCPUProfile(&buf); err == nil {
		busy(30 * time.Millisecond)
		rpprof.StopCPUProfile()
		seeds(f, buf.Bytes())
	}
	f.Add([]byte{0x1f, 0x8b})
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := readProfile(bytes.NewReader(b))
		if err == nil && (v == nil || v.SchedulerShare < 0 || v.SchedulerShare > 1) {
			t.Errorf("view %+v", v)
		}
	})
}

// FuzzReadDebug: the body of a target's /debug/cpuwork.
func FuzzReadDebug(f *testing.F) {
	f.Add([]byte(`{"sample":{"interval_ns":1000000000,"threads":3},"executor":{"classes":[{"class":"interactive"}],"slow_tasks":[]}}`))
	f.Add([]byte(`{"sample":{"interval_ns":0}}`))
	f.Add([]byte(`{"sample":`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, _, err := readDebug(bytes.NewReader(b))
		if err == nil && (s == nil || s.Interval == 0) {
			t.Errorf("no error and sample %+v", s)
		}
	})
}
