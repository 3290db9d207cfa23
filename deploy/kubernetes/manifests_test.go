// Package kubernetes holds the manifests that deploy examples/service with
// autoscaling on cpuwork's queue wait; its test checks them.
package kubernetes

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/cpuwork/cpuwork/prom"
	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/promql/parser"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// objects reads every YAML document of every manifest.
func objects(t *testing.T) map[string][][]byte {
	t.Helper()
	files, _ := filepath.Glob("*.yaml")
	if len(files) == 0 {
		t.Fatal("no manifests")
	}
	out := map[string][][]byte{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			j, err := yaml.YAMLToJSON([]byte(doc))
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			var meta struct{ Kind string }
			if err := json.Unmarshal(j, &meta); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			out[meta.Kind] = append(out[meta.Kind], j)
		}
	}
	return out
}

// strict decodes j into v, refusing any field v's type does not have.
func strict(t *testing.T, j []byte, v any) {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(j))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		t.Fatalf("%T: %v\n%s", v, err, j)
	}
}

// exported lists the metric names the collector exports, with the series
// suffixes of its histograms.
func exported() []string {
	ch := make(chan *prometheus.Desc, 64)
	prom.NewCollector(nil, prom.Options{}).Describe(ch)
	close(ch)
	var names []string
	re := regexp.MustCompile(`fqName: "([^"]+)"`)
	for d := range ch {
		n := re.FindStringSubmatch(d.String())[1]
		names = append(names, n, n+"_bucket", n+"_sum", n+"_count")
	}
	return names
}

// checkPromQL parses expr and checks that every metric it selects is one
// the collector exports.
func checkPromQL(t *testing.T, where, expr string, names []string) {
	t.Helper()
	e, err := parser.ParseExpr(expr)
	if err != nil {
		t.Errorf("%s: %q does not parse: %v", where, expr, err)
		return
	}
	n := 0
	parser.Inspect(e, func(node parser.Node, _ []parser.Node) error {
		if vs, ok := node.(*parser.VectorSelector); ok {
			n++
			if !slices.Contains(names, vs.Name) {
				t.Errorf("%s: %q selects %s, which the collector does not export", where, expr, vs.Name)
			}
		}
		return nil
	})
	if n == 0 {
		t.Errorf("%s: %q selects no metric", where, expr)
	}
}

func TestManifestsDecodeStrictlyAndQueryOnlyExportedMetrics(t *testing.T) {
	objs := objects(t)
	names := exported()
	want := map[string]int{"Deployment": 1, "Service": 1, "PodMonitor": 1, "ConfigMap": 1, "HorizontalPodAutoscaler": 1, "ScaledObject": 1}
	for kind, n := range want {
		if len(objs[kind]) != n {
			t.Errorf("%d %s objects, want %d", len(objs[kind]), kind, n)
		}
	}

	var dep appsv1.Deployment
	strict(t, objs["Deployment"][0], &dep)
	c := dep.Spec.Template.Spec.Containers[0]
	req, lim := c.Resources.Requests.Cpu(), c.Resources.Limits.Cpu()
	if req.Cmp(*lim) != 0 || lim.MilliValue()%1000 != 0 {
		t.Errorf("CPU request %v and limit %v: want equal whole CPUs (Guaranteed QoS, static CPU manager)", req, lim)
	}
	for _, e := range c.Env {
		if e.Name == "GOMAXPROCS" {
			t.Error("GOMAXPROCS is set: Go >= 1.25 follows the CPU limit, and a fixed value stops it")
		}
	}
	var svc corev1.Service
	strict(t, objs["Service"][0], &svc)

	var pm monitoringv1.PodMonitor
	strict(t, objs["PodMonitor"][0], &pm)
	if ep := pm.Spec.PodMetricsEndpoints; len(ep) != 1 || ep[0].Path != "/metrics" || ep[0].Port == nil || *ep[0].Port != c.Ports[0].Name {
		t.Errorf("the PodMonitor does not scrape the container's %s port on /metrics: %+v", c.Ports[0].Name, ep)
	}

	// prometheus-adapter: the rule's queries parse once its template
	// placeholders are filled, and it exposes what the HPA asks for.
	rules := adapterRules(t)
	var adapterMetrics []string
	for _, r := range rules {
		checkPromQL(t, "adapter seriesQuery", r.SeriesQuery, names)
		checkPromQL(t, "adapter metricsQuery", fillAdapterTemplate(r.MetricsQuery), names)
		adapterMetrics = append(adapterMetrics, r.Name.As)
	}

	var hpa autoscalingv2.HorizontalPodAutoscaler
	strict(t, objs["HorizontalPodAutoscaler"][0], &hpa)
	if hpa.Spec.ScaleTargetRef.Name != dep.Name || hpa.Spec.ScaleTargetRef.Kind != "Deployment" {
		t.Errorf("the HPA scales %+v, not the Deployment %s", hpa.Spec.ScaleTargetRef, dep.Name)
	}
	for _, m := range hpa.Spec.Metrics {
		if m.Pods == nil || !slices.Contains(adapterMetrics, m.Pods.Metric.Name) {
			t.Errorf("the HPA uses %+v, which no adapter rule exposes (%v)", m, adapterMetrics)
		}
	}

	var so kedav1alpha1.ScaledObject
	strict(t, objs["ScaledObject"][0], &so)
	if so.Spec.ScaleTargetRef == nil || so.Spec.ScaleTargetRef.Name != dep.Name {
		t.Errorf("the ScaledObject scales %+v, not %s", so.Spec.ScaleTargetRef, dep.Name)
	}
	for i, tr := range so.Spec.Triggers {
		if tr.Type != "prometheus" || tr.Metadata["threshold"] == "" {
			t.Errorf("trigger %d: %+v", i, tr)
		}
		checkPromQL(t, "KEDA trigger", tr.Metadata["query"], names)
	}
}

// adapterRule is one prometheus-adapter rule.
type adapterRule struct {
	SeriesQuery string `json:"seriesQuery"`
	Resources   struct {
		Overrides map[string]struct {
			Resource string `json:"resource"`
		} `json:"overrides"`
	} `json:"resources"`
	Name struct {
		Matches string `json:"matches"`
		As      string `json:"as"`
	} `json:"name"`
	MetricsQuery string `json:"metricsQuery"`
}

// adapterRules decodes the prometheus-adapter ConfigMap's rules strictly.
func adapterRules(t *testing.T) []adapterRule {
	t.Helper()
	var cm corev1.ConfigMap
	strict(t, objects(t)["ConfigMap"][0], &cm)
	var rules struct {
		Rules []adapterRule `json:"rules"`
	}
	j, err := yaml.YAMLToJSON([]byte(cm.Data["config.yaml"]))
	if err != nil {
		t.Fatal(err)
	}
	strict(t, j, &rules)
	return rules.Rules
}

// fillAdapterTemplate fills a rule's metricsQuery placeholders as the
// adapter does for the Deployment's pods.
func fillAdapterTemplate(q string) string {
	return strings.NewReplacer("<<.Series>>", "cpuwork_queue_wait_seconds_bucket", "<<.LabelMatchers>>", `namespace="default",pod=~"cpuwork-service-.*"`, "<<.GroupBy>>", "pod").Replace(q)
}
