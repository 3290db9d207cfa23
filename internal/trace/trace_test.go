package trace

import (
	"bytes"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cpuwork/cpuwork/internal/admission"
)

// randomRecords are n records of every shape the recorder writes:
// served with CPU time, refused and gone without, keyed or not, with and
// without targets and deadlines, nanosecond-exact durations.
func randomRecords(rng *rand.Rand, n int) []Record {
	recs := make([]Record, n)
	at := time.Duration(0)
	for i := range recs {
		at += time.Duration(rng.Int64N(int64(5 * time.Millisecond)))
		r := Record{Arrival: at, Class: admission.Class(rng.IntN(admission.NumClasses)), Outcome: Outcome(1 + rng.IntN(4))}
		if r.Outcome == Served {
			r.CPU = 1 + time.Duration(rng.Int64N(int64(time.Second)))
		}
		if rng.IntN(2) == 0 {
			r.Target = time.Duration(rng.Int64N(int64(time.Second)))
		}
		if rng.IntN(3) == 0 {
			r.Deadline = time.Duration(rng.Int64N(int64(2 * time.Second)))
		}
		if rng.IntN(2) == 0 {
			r.Key = "k" + strings.Repeat("f", rng.IntN(16))
		}
		if rng.IntN(4) == 0 {
			r.Kind = "kind, \"quoted\""
		}
		r.QueueWait = time.Duration(rng.Int64N(int64(time.Second)))
		r.Estimated = r.CPU > 0 && rng.IntN(3) == 0
		recs[i] = r
	}
	return recs
}

func write(t testing.TB, recs []Record) []byte {
	var b bytes.Buffer
	w := NewWriter(&b)
	for _, r := range recs {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// What the writer writes the reader reads back exactly, to the
// nanosecond, for every field.
func TestWhatIsWrittenIsReadBackExactly(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		recs := randomRecords(rng, 1+rng.IntN(500))
		got, unsorted, err := Read(bytes.NewReader(write(t, recs)))
		if err != nil {
			t.Fatal(err)
		}
		if unsorted != 0 {
			t.Fatalf("sorted input reported unsorted at line %d", unsorted)
		}
		if !reflect.DeepEqual(got, recs) {
			for i := range recs {
				if got[i] != recs[i] {
					t.Fatalf("record %d: wrote %+v, read %+v", i, recs[i], got[i])
				}
			}
			t.Fatalf("read %d records of %d", len(got), len(recs))
		}
	}
}

// The writer refuses what the reader would refuse, and writes nothing of it.
func TestTheWriterRefusesWhatCannotBeRead(t *testing.T) {
	for _, r := range []Record{
		{Class: 9, CPU: 1, Outcome: Served},
		{Class: 1, Outcome: Served}, // ran, no CPU time
		{Class: 1, CPU: -1},
		{Class: 1, CPU: 1, Key: strings.Repeat("k", MaxKeyBytes+1)},
		{Class: 1, CPU: 1, Outcome: 17},
	} {
		var b bytes.Buffer
		w := NewWriter(&b)
		if err := w.Write(r); err == nil {
			t.Errorf("%+v: written", r)
		}
		w.Flush()
		if b.Len() != 0 {
			t.Errorf("%+v: wrote %q", r, b.String())
		}
	}
}

// A request that never ran is sized at its class's median, else at
// every request's; a trace where nothing ran cannot be sized.
func TestRequestsThatNeverRanAreSizedAtTheirClasssMedian(t *testing.T) {
	ms := time.Millisecond
	recs := []Record{
		{Class: admission.Interactive, CPU: 1 * ms, Outcome: Served},
		{Class: admission.Interactive, CPU: 3 * ms, Outcome: Served},
		{Class: admission.Interactive, CPU: 9 * ms, Outcome: Served},
		{Class: admission.Interactive, Outcome: Refused},
		{Class: admission.Batch, CPU: 100 * ms, Outcome: Served},
		{Class: admission.Critical, Outcome: GaveUp},
	}
	n, err := SizeUnknown(recs)
	if err != nil || n != 2 {
		t.Fatalf("sized %d, %v", n, err)
	}
	if recs[3].CPU != 3*ms || recs[5].CPU != 9*ms {
		t.Fatalf("sized at %v and %v, want 3ms (interactive's median) and 9ms (every request's)", recs[3].CPU, recs[5].CPU)
	}
	if _, err := SizeUnknown([]Record{{Class: 1, Outcome: Refused}}); err == nil {
		t.Fatal("a trace where nothing ran was sized")
	}
}

// An empty cpu_ms is a request that never ran only when its outcome says
// so; a served one without CPU time is refused with its line.
func TestAnEmptyCPUTimeNeedsAnOutcomeThatDidNotRun(t *testing.T) {
	if _, _, err := Read(strings.NewReader("arrival_ms,class,cpu_ms,outcome\n0,interactive,,refused\n")); err != nil {
		t.Fatal(err)
	}
	for _, in := range []string{
		"arrival_ms,class,cpu_ms,outcome\n0,interactive,,served\n",
		"arrival_ms,class,cpu_ms\n0,interactive,\n",
		"arrival_ms,class,cpu_ms,outcome\n0,interactive,0,refused\n",
	} {
		if _, _, err := Read(strings.NewReader(in)); err == nil || !strings.Contains(err.Error(), "line 2: cpu_ms") {
			t.Errorf("%q: %v", in, err)
		}
	}
}

// FuzzTrace: any text is read or refused, never a panic; what is read
// writes back and reads the same again (one format, both ways).
func FuzzTrace(f *testing.F) {
	f.Add(string(write(f, randomRecords(rand.New(rand.NewPCG(3, 4)), 5))))
	f.Add("arrival_ms,class,cpu_ms,deadline_ms,kind\n0,interactive,2,50,small\n0.5,critical,0.1,,\n1,batch,20,,big\n")
	f.Add("class,cpu_ms,arrival_ms,outcome,key\nbackground,1e3,1e-3,served,a\ninteractive,,2,gave-up,\n")
	f.Fuzz(func(t *testing.T, in string) {
		recs, _, err := Read(strings.NewReader(in))
		if err != nil {
			return
		}
		again, _, err := Read(bytes.NewReader(write(t, recs)))
		if err != nil {
			t.Fatalf("what was read does not read back: %v", err)
		}
		if !reflect.DeepEqual(again, recs) {
			t.Fatalf("read %+v, wrote and read back %+v", recs, again)
		}
	})
}
