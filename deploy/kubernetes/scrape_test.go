package kubernetes

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/cpuwork/cpuwork"
	"github.com/cpuwork/cpuwork/prom"
	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// targetLabels are the labels Prometheus adds to every series it scrapes
// from a pod (the PodMonitor's target), which the exporter itself never
// writes.
var targetLabels = map[string]bool{"namespace": true, "pod": true, "__name__": true}

// Every series the HPA's adapter rule and KEDA's triggers select exists
// in what a running collector exports — name and labels (class,
// outcome), the target's namespace and pod aside — once the executor
// has served and shed work.
func TestQueriesSelectSeriesARunningCollectorExports(t *testing.T) {
	e, err := cpuwork.New(cpuwork.Options{Slots: 1, Classes: [4]cpuwork.ClassOptions{{}, {QueueLimit: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	hold, release := make(chan struct{}), make(chan struct{})
	go e.Do(context.Background(), cpuwork.Interactive, func(context.Context) error { close(hold); <-release; return nil })
	<-hold
	queued := make(chan error)
	go func() {
		queued <- e.Do(context.Background(), cpuwork.Interactive, func(context.Context) error { return nil })
	}()
	deadline := time.Now().Add(5 * time.Second)
	for e.Stats().Classes[cpuwork.Interactive].Queued == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if err := e.Do(context.Background(), cpuwork.Interactive, func(context.Context) error { return nil }); err == nil {
		t.Fatal("a task beyond a full queue was admitted")
	}
	close(release)
	if err := <-queued; err != nil {
		t.Fatal(err)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(prom.NewCollector(e, prom.Options{}))
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var series []labels.Labels
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			b := labels.NewScratchBuilder(4)
			for _, l := range m.GetLabel() {
				b.Add(l.GetName(), l.GetValue())
			}
			base := b.Labels()
			switch f.GetType().String() {
			case "HISTOGRAM":
				for _, bk := range m.GetHistogram().GetBucket() {
					series = append(series, withName(base, name+"_bucket", "le", model.FloatString(bk.GetUpperBound()).String()))
				}
				series = append(series, withName(base, name+"_bucket", "le", "+Inf"), withName(base, name+"_sum"), withName(base, name+"_count"))
			default:
				series = append(series, withName(base, name))
			}
		}
	}

	var queries []string
	for _, r := range adapterRules(t) {
		queries = append(queries, r.SeriesQuery, fillAdapterTemplate(r.MetricsQuery))
	}
	var so kedav1alpha1.ScaledObject
	strict(t, objects(t)["ScaledObject"][0], &so)
	for _, tr := range so.Spec.Triggers {
		queries = append(queries, tr.Metadata["query"])
	}
	if len(queries) < 3 {
		t.Fatalf("found %d queries in the manifests: %q", len(queries), queries)
	}
	for _, q := range queries {
		e, err := parser.ParseExpr(q)
		if err != nil {
			t.Errorf("%q: %v", q, err)
			continue
		}
		parser.Inspect(e, func(node parser.Node, _ []parser.Node) error {
			vs, ok := node.(*parser.VectorSelector)
			if !ok {
				return nil
			}
			for _, s := range series {
				if matches(s, vs) {
					return nil
				}
			}
			t.Errorf("%q: no exported series matches %s", q, vs)
			return nil
		})
	}
}

// withName is base with __name__ set to name and the extra label pairs.
func withName(base labels.Labels, name string, extra ...string) labels.Labels {
	b := labels.NewBuilder(base)
	b.Set("__name__", name)
	for i := 0; i+1 < len(extra); i += 2 {
		b.Set(extra[i], extra[i+1])
	}
	return b.Labels()
}

// matches reports whether s is selected by vs, the target's labels aside.
func matches(s labels.Labels, vs *parser.VectorSelector) bool {
	if s.Get("__name__") != vs.Name {
		return false
	}
	for _, m := range vs.LabelMatchers {
		if targetLabels[m.Name] {
			continue
		}
		if !m.Matches(s.Get(m.Name)) {
			return false
		}
	}
	return true
}
