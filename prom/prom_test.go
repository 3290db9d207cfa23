package prom

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cpuwork/cpuwork"
	"github.com/cpuwork/cpuwork/account"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestCollectorExportsTheExecutorAndLintsClean(t *testing.T) {
	e, err := cpuwork.New(cpuwork.Options{Slots: 1, Classes: [4]cpuwork.ClassOptions{cpuwork.Batch: {QueueLimit: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	ctx := context.Background()
	// 80 tasks through the fast path, each starting at least 300 µs after
	// the one before: at that rate the fast path times every task (its
	// stride grows only for tasks under 100 µs apart), so the histograms
	// count exactly 80 slot times, and 81 queue waits with the task that
	// holds the slot below.
	for range 79 {
		e.Do(ctx, cpuwork.Interactive, func(context.Context) error { time.Sleep(300 * time.Microsecond); return nil })
	}
	e.Do(ctx, cpuwork.Interactive, func(context.Context) error { panic("boom") })
	// Hold the slot, fill Batch's queue of one, and get one rejected.
	gate := make(chan struct{})
	running := make(chan struct{})
	go e.Do(ctx, cpuwork.Interactive, func(context.Context) error { close(running); <-gate; return nil })
	<-running
	tenant := cpuwork.WithKey(ctx, "tenant-a")
	queued, _ := e.Go(tenant, cpuwork.Batch, func(context.Context) error { return nil })
	if _, err := e.Go(tenant, cpuwork.Batch, func(context.Context) error { return nil }); !errors.Is(err, cpuwork.ErrSaturated) {
		t.Fatalf("third task: %v", err)
	}

	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector(e, Options{}))
	want := `
# HELP cpuwork_queued Tasks waiting for a slot, per class.
# TYPE cpuwork_queued gauge
cpuwork_queued{class="background"} 0
cpuwork_queued{class="batch"} 1
cpuwork_queued{class="critical"} 0
cpuwork_queued{class="interactive"} 0
# HELP cpuwork_slots Tasks the executor runs at once (its slot count).
# TYPE cpuwork_slots gauge
cpuwork_slots 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "cpuwork_queued", "cpuwork_slots"); err != nil {
		t.Error(err)
	}
	n, err := testutil.GatherAndCount(reg, "cpuwork_tasks_total")
	if err != nil || n != 4*8 {
		t.Errorf("cpuwork_tasks_total series: %d, %v; want 4 classes x 8 outcomes", n, err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.Metric {
			key := mf.GetName()
			for _, l := range m.Label {
				key += "," + l.GetValue()
			}
			switch {
			case m.Counter != nil:
				got[key] = m.Counter.GetValue()
			case m.Histogram != nil:
				got[key] = float64(m.Histogram.GetSampleCount())
				if mf.GetName() == "cpuwork_slot_seconds" && len(m.Label) == 1 && m.Label[0].GetValue() == "interactive" {
					for _, b := range m.Histogram.Bucket {
						// Only the panicking task can take under 200 µs; the
						// sleeps take at least 300 µs.
						if b.GetUpperBound() == 0.0002 && b.GetCumulativeCount() > 1 {
							t.Errorf("interactive slot time: %d tasks at most 200 µs, want <= 1", b.GetCumulativeCount())
						}
					}
				}
			}
		}
	}
	for k, v := range map[string]float64{
		"cpuwork_tasks_total,interactive,completed": 80,
		"cpuwork_tasks_total,interactive,panicked":  1,
		"cpuwork_tasks_total,batch,rejected":        1,
		"cpuwork_key_refused_total,batch,tenant-a":  1,
		"cpuwork_slot_seconds,interactive":          80,
		"cpuwork_queue_wait_seconds,interactive":    81,
	} {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if _, ok := got["cpuwork_key_slot_seconds_total,batch,tenant-a"]; !ok {
		t.Error("the key's slot time not exported")
	}
	if _, ok := got["cpuwork_os_run_delay_seconds_total"]; !ok {
		t.Error("no run delay exported")
	}
	if got["cpuwork_go_sched_latency_seconds"] == 0 {
		t.Error("no scheduling latency exported")
	}
	for _, k := range []string{"cpuwork_netwatch_polls_total", "cpuwork_netwatch_wakes_total", "cpuwork_netwatch_descriptors_total,true", "cpuwork_netwatch_descriptors_total,false"} {
		if _, ok := got[k]; !ok {
			t.Errorf("%s not exported", k)
		}
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	close(gate)
	queued.Wait(ctx)
}

func TestRebucketNeverCountsAnObservationBelowItsBound(t *testing.T) {
	got := rebucket([]float64{0.00001, 0.00015, 0.0003, 0.004}, []uint64{1, 3, 7, 9}, []float64{0.0001, 0.0002, 0.0005, 0.001, 0.005})
	want := map[float64]uint64{0.0001: 1, 0.0002: 3, 0.0005: 7, 0.001: 7, 0.005: 9}
	for b, n := range want {
		if got[b] != n {
			t.Errorf("bucket %v: %d, want %d", b, got[b], n)
		}
	}
}

// Accounted tasks are exported per class and part, one series per part,
// each counting every accounted task.
func TestTaskLatencyPartsAreExported(t *testing.T) {
	e, err := cpuwork.New(cpuwork.Options{Slots: 1, Account: account.Options{Every: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	for range 5 {
		e.Do(context.Background(), cpuwork.Interactive, func(context.Context) error { time.Sleep(time.Millisecond); return nil })
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector(e, Options{NoProcess: true}))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	parts := map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != "cpuwork_task_latency_seconds" {
			continue
		}
		for _, m := range mf.Metric {
			var class, part string
			for _, l := range m.Label {
				switch l.GetName() {
				case "class":
					class = l.GetValue()
				case "part":
					part = l.GetValue()
				}
			}
			if class != "interactive" {
				t.Errorf("series for class %q: only interactive was accounted", class)
			}
			parts[part] = m.Histogram.GetSampleCount()
		}
	}
	if len(parts) != account.NumParts {
		t.Fatalf("parts exported: %v, want %d", parts, account.NumParts)
	}
	for p, n := range parts {
		if n != 5 {
			t.Errorf("part %s counts %d tasks, want 5", p, n)
		}
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

// A key a client sent with bytes that are not UTF-8 (a raw header value)
// is exported as a valid label value, not a panic in the collector that
// would end the process at the next scrape.
func TestAKeyThatIsNotUTF8IsExportedValid(t *testing.T) {
	e, err := cpuwork.New(cpuwork.Options{Slots: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	ctx := context.Background()
	gate := make(chan struct{})
	running := make(chan struct{})
	go e.Do(ctx, cpuwork.Interactive, func(context.Context) error { close(running); <-gate; return nil })
	<-running
	for _, key := range []string{"bad-\xff\xfe", strings.Repeat("é", 40) + "\xc3"} {
		tk, err := e.Go(cpuwork.WithKey(ctx, key), cpuwork.Interactive, func(context.Context) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		defer tk.Wait(ctx)
	}
	close(gate)
	time.Sleep(10 * time.Millisecond)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector(e, Options{}))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	n := 0
	for _, mf := range mfs {
		if mf.GetName() == "cpuwork_key_slot_seconds_total" {
			n = len(mf.GetMetric())
		}
	}
	if n != 2 {
		t.Errorf("%d keys exported, want 2", n)
	}
}
