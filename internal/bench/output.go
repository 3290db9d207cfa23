package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// WriteTables prints one table per scenario with ratios against the
// baseline and the verdict.
func WriteTables(w io.Writer, rep *Report) {
	m := rep.Machine
	fmt.Fprintf(w, "machine: %d CPUs, budget %.3g cores (%s), %d slots, GOMAXPROCS %d, kernel %s, %s, cgroup v%d\n",
		m.CPUs, m.BudgetCores, m.BudgetSource, m.Slots, m.GOMAXPROCS, m.Kernel, m.GoVersion, m.CgroupVersion)
	fmt.Fprintf(w, "workloads (time per item, one core):")
	for _, wl := range rep.Workloads {
		if wl.Error != "" {
			fmt.Fprintf(w, " %s=ERROR(%s)", wl.Name, wl.Error)
		} else {
			fmt.Fprintf(w, " %s=%s", wl.Name, ms(wl.PerItemS))
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "repeats: %d per variant, in a shuffled order per repeat (seed %d); p99 is the median of the repeats [min-max]; other percentiles pool every repeat\n", rep.Repeat, rep.Seed)
	for _, s := range rep.Scenarios {
		fmt.Fprintf(w, "\n== %s ==\n", s.Name)
		if s.Skipped != "" {
			fmt.Fprintf(w, "skipped: %s\n", s.Skipped)
			continue
		}
		fmt.Fprintf(w, "%s\n", s.Claim)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		extraCols := extraColumns(s.Name)
		fmt.Fprintf(tw, "variant\tmean\tp50\tp90\tp99\tp999\tmax\tp99 vs %s\t", s.Baseline)
		for _, c := range extraCols {
			fmt.Fprintf(tw, "%s\t", c.title)
		}
		fmt.Fprintf(tw, "CPU s\tvalid\t\n")
		for _, v := range s.Variants {
			l := v.Latency
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.3fx\t", v.Name, ms(l.Mean), ms(l.P50), ms(l.P90), p99Spread(v), ms(l.P999), ms(l.Max), v.Ratio["p99"])
			for _, c := range extraCols {
				fmt.Fprintf(tw, "%s\t", c.format(v.Extra[c.key]))
			}
			valid := "yes"
			if !v.Valid {
				valid = "NO: " + v.Invalid
			}
			fmt.Fprintf(tw, "%.2f\t%s\t\n", v.CPU, valid)
		}
		tw.Flush()
		for _, n := range s.Notes {
			fmt.Fprintf(w, "note: %s\n", n)
		}
		for _, v := range s.Variants {
			if v.Privileges != "" {
				fmt.Fprintf(w, "privileges (%s): %s\n", v.Name, v.Privileges)
			}
		}
		fmt.Fprintf(w, "verdict: %s\n", s.Verdict)
	}
}

// p99Spread prints the median p99 of the repeats and, with several, their
// range.
func p99Spread(v *Variant) string {
	ps := v.p99s()
	if len(ps) < 2 {
		return ms(v.Latency.P99)
	}
	return fmt.Sprintf("%s [%s-%s]", ms(median(ps)), ms(slices.Min(ps)), ms(slices.Max(ps)))
}

type column struct {
	key, title string
	format     func(float64) string
}

func extraColumns(scenario string) []column {
	pct := func(x float64) string { return fmt.Sprintf("%.0f%%", x*100) }
	switch {
	case strings.HasPrefix(scenario, "burst"):
		return []column{
			{"first_result_s", "first result", ms},
			{"makespan_s", "makespan", ms},
			{"makespan_over_ideal", "vs ideal", func(x float64) string { return fmt.Sprintf("%+.1f%%", (x-1)*100) }},
		}
	case scenario == "priority":
		return []column{
			{"batch_cpu_per_s", "batch CPU/s", func(x float64) string { return fmt.Sprintf("%.2f", x) }},
			{"batch_share_of_alone", "batch vs alone", pct},
		}
	case scenario == "timers":
		return []column{{"echo_p50_s", "echo p50", ms}, {"echo_p99_s", "echo p99", ms}}
	case scenario == "quota":
		count := func(x float64) string { return fmt.Sprintf("%.0f", x) }
		return []column{
			{"throttled_periods", "throttled", count}, {"periods", "periods", count},
			{"throttled_share", "thr %", pct}, {"quota_used", "quota used", pct},
		}
	case scenario == "service":
		count := func(x float64) string { return fmt.Sprintf("%.0f", x) }
		return []column{
			{"small_p99_s", "small p99", ms}, {"large_p99_s", "large p99", ms},
			{"goodput_of_offered", "goodput", pct}, {"shed", "shed 503", count}, {"errors", "errors", count},
		}
	}
	return nil
}

func ms(s float64) string {
	switch {
	case s == 0:
		return "0"
	case s < 1e-3:
		return fmt.Sprintf("%.0fµs", s*1e6)
	case s < 10:
		return fmt.Sprintf("%.2fms", s*1e3)
	}
	return fmt.Sprintf("%.2fs", s)
}

// WriteJSON writes the report as indented JSON.
func WriteJSON(w io.Writer, rep *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// WriteDir writes results.json, the HDR histograms (histograms/*.json,
// hdrhistogram-go snapshots in microseconds) and index.html with inline SVG
// plots into dir.
func WriteDir(dir string, rep *Report) error {
	if err := os.MkdirAll(filepath.Join(dir, "histograms"), 0o755); err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := WriteJSON(&buf, rep); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), buf.Bytes(), 0o644); err != nil {
		return err
	}
	type plotSet struct {
		Scenario *Scenario
		Percent  template.HTML
		OverTime template.HTML
		CPU      template.HTML
	}
	var sets []plotSet
	for _, s := range rep.Scenarios {
		if s.Skipped != "" {
			sets = append(sets, plotSet{Scenario: s})
			continue
		}
		for _, v := range s.Variants {
			if v.hist == nil {
				continue
			}
			b, err := json.Marshal(v.hist.Export())
			if err != nil {
				return err
			}
			name := fmt.Sprintf("%s-%s.json", s.Name, v.Name)
			if err := os.WriteFile(filepath.Join(dir, "histograms", name), b, 0o644); err != nil {
				return err
			}
		}
		ps := plotSet{Scenario: s}
		var err error
		if ps.Percent, err = percentilePlot(s); err != nil {
			return err
		}
		if ps.OverTime, err = overTimePlot(s); err != nil {
			return err
		}
		if ps.CPU, err = cpuPlot(s); err != nil {
			return err
		}
		sets = append(sets, ps)
	}
	var tables bytes.Buffer
	WriteTables(&tables, rep)
	f, err := os.Create(filepath.Join(dir, "index.html"))
	if err != nil {
		return err
	}
	defer f.Close()
	return pageTmpl.Execute(f, map[string]any{"Report": rep, "Sets": sets, "Tables": tables.String()})
}

var pageTmpl = template.Must(template.New("page").
	Funcs(template.FuncMap{"deref": func(b *bool) bool { return b != nil && *b }}).
	Parse(pageHTML))

const pageHTML = `<!doctype html>
<html><head><meta charset="utf-8"><title>cpuwork bench</title>
<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em}
pre{background:#f6f6f6;padding:1em;overflow-x:auto;font-size:12px}
.plots{display:flex;flex-wrap:wrap;gap:1em}.plots div{flex:1 1 340px}
.holds{color:#070}.fails{color:#a00}</style></head><body>
<h1>cpuwork bench</h1>
<p>Started {{.Report.Started.Format "2006-01-02 15:04:05 MST"}}, {{printf "%.0f" .Report.DurationS}} s{{if .Report.Quick}} (quick){{end}}.
Latency runs from each task's arrival (intended send time, or the burst's start) to its completion.
All variants of a scenario ran in this one process, alternated. Schema: docs/bench.md.</p>
{{range .Sets}}<h2>{{.Scenario.Name}}</h2>
{{if .Scenario.Skipped}}<p>Skipped: {{.Scenario.Skipped}}</p>{{else}}
<p>{{.Scenario.Claim}}</p>
<p class="{{if deref .Scenario.Holds}}holds{{else}}fails{{end}}"><b>Verdict:</b> {{.Scenario.Verdict}}</p>
<div class="plots"><div>{{.Percent}}</div><div>{{.OverTime}}</div><div>{{.CPU}}</div></div>
{{end}}{{end}}
<h2>Tables</h2><pre>{{.Tables}}</pre>
</body></html>
`

func svg(p *plot.Plot) (template.HTML, error) {
	w, err := p.WriterTo(6*vg.Inch, 4*vg.Inch, "svg")
	if err != nil {
		return "", err
	}
	var b bytes.Buffer
	if _, err := w.WriteTo(&b); err != nil {
		return "", err
	}
	out := b.String()
	if i := strings.Index(out, "<svg"); i > 0 {
		out = out[i:] // drop the XML prolog for inline use
	}
	return template.HTML(out), nil
}

// percentilePlot: latency (ms, log) against percentile on the HdrHistogram
// "1/(1-q)" axis, one line per variant.
func percentilePlot(s *Scenario) (template.HTML, error) {
	p := plot.New()
	p.Title.Text = s.Name + ": latency by percentile"
	p.X.Label.Text = "percentile"
	p.X.Tick.Marker = percentileTicks{}
	p.Y.Label.Text = "latency (ms)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = msTicks{}
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.TextStyle.Font.Size = vg.Points(8)
	var args []any
	for _, v := range s.Variants {
		if v.hist == nil {
			continue
		}
		var pts plotter.XYs
		for _, q := range []float64{10, 25, 50, 75, 90, 95, 99, 99.5, 99.9} {
			y := float64(v.hist.ValueAtQuantile(q)) / 1e3
			pts = append(pts, plotter.XY{X: math.Log10(100 / (100 - q)), Y: math.Max(y, 0.001)})
		}
		args = append(args, v.Name, pts)
	}
	if len(args) > 0 {
		if err := plotutil.AddLinePoints(p, args...); err != nil {
			return "", err
		}
		p.X.Max += 0.2 // room for the last tick's label
	}
	return svg(p)
}

// overTimePlot: sampled latency against time since the variant's start.
func overTimePlot(s *Scenario) (template.HTML, error) {
	p := plot.New()
	p.Title.Text = s.Name + ": latency over time"
	p.X.Label.Text = "seconds since start (rounds overlaid)"
	p.Y.Label.Text = "latency (ms)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = msTicks{}
	for i, v := range s.Variants {
		if len(v.Series) == 0 {
			continue
		}
		pts := make(plotter.XYs, len(v.Series))
		for j, pt := range v.Series {
			pts[j] = plotter.XY{X: pt[0], Y: math.Max(pt[1]*1e3, 0.001)}
		}
		sc, err := plotter.NewScatter(pts)
		if err != nil {
			return "", err
		}
		sc.GlyphStyle.Color = plotutil.Color(i)
		sc.GlyphStyle.Radius = vg.Points(1)
		p.Add(sc)
		p.Legend.Add(v.Name, sc)
	}
	return svg(p)
}

// cpuPlot: CPU seconds used per variant.
func cpuPlot(s *Scenario) (template.HTML, error) {
	p := plot.New()
	p.Title.Text = s.Name + ": CPU time used"
	p.Y.Label.Text = "CPU seconds (all rounds)"
	var vals plotter.Values
	var names []string
	for _, v := range s.Variants {
		vals = append(vals, v.CPU)
		names = append(names, v.Name)
	}
	bars, err := plotter.NewBarChart(vals, vg.Points(20))
	if err != nil {
		return "", err
	}
	bars.Color = plotutil.Color(0)
	p.Add(bars)
	p.NominalX(names...)
	if len(names) > 5 {
		p.X.Tick.Label.Rotation = math.Pi / 6
		p.X.Tick.Label.XAlign, p.X.Tick.Label.YAlign = -0.9, -0.2
	}
	return svg(p)
}

// percentileTicks labels the 1/(1-q) log axis with percentiles.
type percentileTicks struct{}

func (percentileTicks) Ticks(min, max float64) []plot.Tick {
	var t []plot.Tick
	for _, q := range []float64{50, 90, 99, 99.9, 99.99} {
		x := math.Log10(100 / (100 - q))
		if x >= min-1e-9 && x <= max+1e-9 {
			t = append(t, plot.Tick{Value: x, Label: strconv.FormatFloat(q, 'f', -1, 64)})
		}
	}
	return t
}

// msTicks puts labelled ticks at 1, 2 and 5 times powers of ten (in ms)
// on a log axis.
type msTicks struct{}

func (msTicks) Ticks(min, max float64) []plot.Tick {
	steps := []float64{1, 2, 5}
	if max/min < 20 { // a narrow range: label more values
		steps = []float64{1, 1.5, 2, 3, 4, 5, 7}
	}
	var t []plot.Tick
	for e := math.Floor(math.Log10(min)) - 1; e <= math.Ceil(math.Log10(max)); e++ {
		for _, m := range steps {
			v := m * math.Pow(10, e)
			if v >= min && v <= max {
				t = append(t, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'g', 3, 64)})
			}
		}
	}
	return t
}
