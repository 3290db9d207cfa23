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

	"github.com/cpuwork/cpuwork/account"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Color makes WriteTables colour the verdict words with ANSI escapes
// (better green, equivalent blue, worse red, inconclusive yellow, not
// judged and smoke test grey): set it when the output is a terminal.
var Color bool

// colored is the status word, coloured when Color is set.
func colored(st Status) string {
	if !Color {
		return string(st)
	}
	code := map[Status]string{StatusBetter: "32", StatusEquivalent: "34", StatusWorse: "31", StatusInconclusive: "33", StatusNotJudged: "90", StatusSkipped: "90", StatusSmoke: "90"}[st]
	if code == "" {
		return string(st)
	}
	return "\x1b[1;" + code + "m" + string(st) + "\x1b[0m"
}

// WriteTables prints the run's header, one table per scenario with its
// verdict (WriteScenario), and the summary (WriteSummary).
func WriteTables(w io.Writer, rep *Report) {
	writeHeader(w, rep)
	for _, s := range rep.Scenarios {
		WriteScenario(w, s)
	}
	writeSummary(w, rep)
}

// WriteSummary prints the run's header and the summary of one line per
// scenario: what a run that streamed its scenarios prints at the end.
func WriteSummary(w io.Writer, rep *Report) {
	fmt.Fprintln(w)
	writeHeader(w, rep)
	writeSummary(w, rep)
}

func writeHeader(w io.Writer, rep *Report) {
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
	if rep.Quick {
		fmt.Fprintf(w, "SMOKE TEST (--quick): one pair per variant, no verdicts; run without --quick for verdicts (seed %d)\n", rep.Seed)
		return
	}
	fmt.Fprintf(w, "pairs: every variant runs once per round, alternated in a shuffled order (seed %d); %s; verdicts from the interval of the per-pair ratios against the best alternative and the A/A control's margin (docs/bench.md#how-to-read-a-verdict)\n", rep.Seed, rep.PairsRule)
}

// WriteScenario prints one scenario: its table, notes and verdict with
// every comparison and figure.
func WriteScenario(w io.Writer, s *Scenario) {
	fmt.Fprintf(w, "\n== %s ==\n", s.Name)
	if s.Skipped != "" {
		fmt.Fprintf(w, "skipped: %s\n", s.Skipped)
		return
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
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t", v.Name, ms(meanOfRepeats(v)), ms(l.P50), ms(l.P90), p99Spread(v), ms(l.P999), ms(l.Max), vsBaseline(v))
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
	for _, v := range splitVariants(s) {
		fmt.Fprintf(w, "where the p99 tasks' time went (%s, mean of the slowest 1 %% of %s's accounted tasks, from arrival at the executor):", v.Name, v.Name)
		for part := range account.Part(account.NumParts) {
			if x := v.Extra[splitKey(part)]; x > 0 {
				fmt.Fprintf(w, " %s %s", part, ms(x))
			}
		}
		fmt.Fprintln(w)
	}
	sum := ": " + s.Summary
	if s.Summary == string(status(s)) {
		sum = ""
	}
	fmt.Fprintf(w, "verdict: %s%s (%d pairs, %.0f s)\n", colored(status(s)), sum, s.Pairs, s.DurationS)
	if s.Calibration != "" {
		fmt.Fprintf(w, "  calibration: %s\n", s.Calibration)
	}
	for _, c := range s.Checks {
		if c.Kind == "comparison" {
			fmt.Fprintf(w, "  - %s\n", c.line())
			if why := toDecide(s, c); why != "" {
				fmt.Fprintf(w, "    %s\n", why)
			}
		}
	}
	for _, c := range s.Checks {
		if c.Kind == "figure" {
			fmt.Fprintf(w, "  · %s\n", c.line())
		}
	}
}

func writeSummary(w io.Writer, rep *Report) {
	if rep.Quick {
		fmt.Fprintf(w, "\n== summary: SMOKE TEST, no verdicts ==\n")
	} else {
		fmt.Fprintf(w, "\n== summary: cpuwork against the best alternative (better, equivalent or worse beyond the A/A margin; each interval at the level printed with it, 95 %% over a scenario's looks together) ==\n")
	}
	for _, s := range rep.Scenarios {
		sum := s.Summary
		if s.Skipped != "" {
			sum = s.Skipped
		}
		if h := nearestDecision(s); h != "" {
			sum += "; " + h
		}
		fmt.Fprintf(w, "%-11s %s: %s\n", s.Name, colored(status(s)), sum)
	}
	writeAnswers(w, rep)
	fmt.Fprintf(w, "took %.0f s\n", rep.DurationS)
}

// meanOfRepeats is the median of the repeats' mean latencies (the pooled
// mean without repeats): the statistic the verdicts judge the mean on.
func meanOfRepeats(v *Variant) float64 {
	if len(v.Repeats) == 0 {
		return v.Latency.Mean
	}
	var xs []float64
	for _, r := range v.Repeats {
		xs = append(xs, r.Mean)
	}
	return median(xs)
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
	case strings.HasPrefix(scenario, "priority"):
		return []column{
			{"generator_lateness_p99_s", "gen. late p99", ms},
			{"batch_cpu_per_s", "batch CPU/s", func(x float64) string { return fmt.Sprintf("%.2f", x) }},
			{"batch_share_of_alone", "batch vs alone", pct},
			{"gc_stop_max_s", "GC stop max", ms},
		}
	case scenario == "timers":
		return []column{{"echo_p50_s", "echo p50", ms}, {"echo_p99_s", "echo p99", ms}, {"batch_jobs_per_s", "batch jobs/s", func(x float64) string { return fmt.Sprintf("%.0f", x) }}}
	case scenario == "quota":
		count := func(x float64) string { return fmt.Sprintf("%.0f", x) }
		return []column{
			{"throttled_periods", "throttled", count}, {"periods", "periods", count},
			{"throttled_share", "thr %", pct}, {"quota_used", "quota used", pct}, {"quota_used_run", "used (run)", pct},
		}
	case scenario == "service", scenario == "inference":
		count := func(x float64) string { return fmt.Sprintf("%.0f", x) }
		cols := []column{
			{"small_p99_s", "small p99", ms}, {"large_p99_s", "large p99", ms},
			{"goodput_per_s", "goodput/s", count}, {"goodput_of_offered", "of offered", pct},
			{"shed_share", "shed %", func(x float64) string { return fmt.Sprintf("%.1f%%", x*100) }}, {"errors", "errors", count},
		}
		if scenario == "inference" {
			cols = append(cols, column{"throttled_share", "thr %", pct}, column{"quota_used", "quota used", pct})
		}
		return cols
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
		Plots    []template.HTML
		Table    template.HTML
		ID       string
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
			name := fileName(s.Name + "-" + v.Name + ".json")
			if err := os.WriteFile(filepath.Join(dir, "histograms", name), b, 0o644); err != nil {
				return err
			}
		}
		ps := plotSet{Scenario: s, Table: htmlTable(s), ID: fileName(s.Name)}
		// One percentile plot per group of at most 8 variants (a
		// competition case, a load level); latency over time only where
		// arrivals are spread in time (not for bursts); CPU per variant.
		for _, g := range variantGroups(s) {
			pl, err := percentilePlot(s, g.title, g.vs)
			if err != nil {
				return err
			}
			ps.Plots = append(ps.Plots, pl)
		}
		if !strings.HasPrefix(s.Name, "burst") {
			g := variantGroups(s)[0]
			pl, err := overTimePlot(s, g.title, g.vs)
			if err != nil {
				return err
			}
			ps.Plots = append(ps.Plots, pl)
		}
		pl, err := cpuPlot(s)
		if err != nil {
			return err
		}
		ps.Plots = append(ps.Plots, pl)
		if pl, ok, err := splitPlot(s); err != nil {
			return err
		} else if ok {
			ps.Plots = append(ps.Plots, pl)
		}
		sets = append(sets, ps)
	}
	f, err := os.Create(filepath.Join(dir, "index.html"))
	if err != nil {
		return err
	}
	defer f.Close()
	return pageTmpl.Execute(f, map[string]any{"Report": rep, "Sets": sets})
}

// fileName makes s safe as a file name or an HTML id: letters, digits,
// '-', '_' and '.' stay, '%' becomes "pct", the rest '_'.
func fileName(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '%':
			b.WriteString("pct")
		case r == '+':
			b.WriteString("-with-")
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	return b.String()
}

type variantGroup struct {
	title string
	vs    []*Variant
}

// variantGroups splits a scenario's variants for plotting: by competition
// case ("+nice0"), by load or quota level ("@95%"), at most 8 per group.
func variantGroups(s *Scenario) []variantGroup {
	var keys []string
	byKey := map[string][]*Variant{}
	for _, v := range s.Variants {
		if v.hist == nil {
			continue
		}
		key := ""
		if i := strings.IndexAny(v.Name, "+@"); i >= 0 {
			key = v.Name[i:]
		}
		if _, ok := byKey[key]; !ok {
			keys = append(keys, key)
		}
		byKey[key] = append(byKey[key], v)
	}
	var groups []variantGroup
	for _, key := range keys {
		vs := byKey[key]
		n := (len(vs) + 7) / 8 // plots for this key, sharing the variants evenly
		for i := range n {
			title := strings.TrimSpace(s.Name + " " + key)
			if n > 1 {
				title += fmt.Sprintf(" (%d/%d)", i+1, n)
			}
			groups = append(groups, variantGroup{title: title, vs: vs[i*len(vs)/n : (i+1)*len(vs)/n]})
		}
	}
	if len(groups) == 0 {
		groups = append(groups, variantGroup{title: s.Name})
	}
	return groups
}

// htmlTable is a scenario's table as HTML (the terminal table's columns).
func htmlTable(s *Scenario) template.HTML {
	var b strings.Builder
	esc := template.HTMLEscapeString
	cols := extraColumns(s.Name)
	b.WriteString("<table><tr><th>variant</th><th>mean</th><th>p50</th><th>p90</th><th>p99 (median [range] of repeats)</th><th>p999</th><th>max</th><th>p99 vs " + esc(s.Baseline) + "</th>")
	for _, c := range cols {
		b.WriteString("<th>" + esc(c.title) + "</th>")
	}
	b.WriteString("<th>CPU s</th><th>valid</th></tr>\n")
	for _, v := range s.Variants {
		l := v.Latency
		fmt.Fprintf(&b, "<tr><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td>",
			esc(v.Name), ms(meanOfRepeats(v)), ms(l.P50), ms(l.P90), esc(p99Spread(v)), ms(l.P999), ms(l.Max), vsBaseline(v))
		for _, c := range cols {
			b.WriteString("<td>" + esc(c.format(v.Extra[c.key])) + "</td>")
		}
		valid := "yes"
		if !v.Valid {
			valid = "no: " + v.Invalid
		}
		fmt.Fprintf(&b, "<td>%.2f</td><td>%s</td></tr>\n", v.CPU, esc(valid))
	}
	b.WriteString("</table>")
	return template.HTML(b.String())
}

// status is a scenario's verdict in one word, for the summary.
func status(s *Scenario) Status {
	switch {
	case s.Skipped != "":
		return StatusSkipped
	case s.Status == "":
		return StatusNotJudged
	}
	return s.Status
}

var pageTmpl = template.Must(template.New("page").
	Funcs(template.FuncMap{"status": status, "nearest": nearestDecision, "todecide": toDecide, "cls": func(s *Scenario) string { return strings.ReplaceAll(string(status(s)), " ", "-") },
		"id": fileName, "cline": func(c CheckResult) string { return c.line() },
		"ccls": func(c CheckResult) string {
			if c.Kind == "figure" {
				return "figure"
			}
			if c.NotJudged != "" {
				return "not-judged"
			}
			return string(c.Verdict)
		}}).
	Parse(pageHTML))

const pageHTML = `<!doctype html>
<html><head><meta charset="utf-8"><title>cpuwork bench</title>
<style>body{font-family:system-ui,sans-serif;max-width:1400px;margin:1.5em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;font-size:13px;margin:.5em 0}td,th{border:1px solid #ddd;padding:3px 7px;text-align:right}
td:first-child,th:first-child{text-align:left}th{background:#f3f3f3}
.summary td,.summary th{text-align:left;vertical-align:top}
.better{background:#e3f4e3;color:#064}.equivalent{background:#e3ecfb;color:#134}.inconclusive{background:#fff3cd;color:#7a5a00}.worse{background:#fbe4e4;color:#900}.skipped,.not-judged,.smoke-test,.figure{background:#eee;color:#555}.smoke{color:#900}
.tag{display:inline-block;padding:1px 8px;border-radius:9px;font-weight:600;white-space:nowrap}
.plots{display:flex;flex-wrap:wrap;gap:.5em}.plots div{flex:0 1 440px}.plots svg{width:100%;height:auto}
.verdict{padding:.5em .8em;border-radius:6px}</style></head><body>
<h1>cpuwork bench</h1>
<p>{{with .Report}}{{.Machine.CPUs}} CPUs, budget {{printf "%.3g" .Machine.BudgetCores}} cores ({{.Machine.BudgetSource}}), GOMAXPROCS {{.Machine.GOMAXPROCS}}, {{.Machine.GoVersion}}, kernel {{.Machine.Kernel}}, cgroup v{{.Machine.CgroupVersion}}.
Started {{.Started.Format "2006-01-02 15:04 MST"}}, {{printf "%.0f" .DurationS}} s; seed {{.Seed}}; {{.PairsRule}}.{{end}}
Latency runs from each task's arrival (intended send time, or the burst's start) to its completion. Schema and method: docs/bench.md.</p>
{{if .Report.Quick}}<h2 class="smoke">Smoke test: no verdicts</h2><p>--quick runs one pair of every variant to check that the bench works; it judges nothing. Run without --quick for verdicts.</p>{{end}}
<h2>Summary</h2>
<p>cpuwork's recommended variant against the <b>best</b> alternative a user would pick, from paired, alternated rounds: <b>better</b> or <b>worse</b> when the confidence interval of the per-pair ratios (at the level printed with it: 95 % over a scenario's looks together, Pocock) lies beyond the equivalence margin that the A/A control (one alternative run twice in every round) measured in the same run (at least 5 %), <b>equivalent</b> when it lies inside it, <b>inconclusive</b> otherwise. Goals (figures) are shown beside their floor and never decide a verdict.</p>
<table class="summary"><tr><th>scenario</th><th>verdict</th><th>finding per case</th></tr>
{{range .Sets}}<tr><td><a href="#{{.ID}}">{{.Scenario.Name}}</a></td>
<td><span class="tag {{cls .Scenario}}">{{status .Scenario}}</span></td><td>{{.Scenario.Summary}}{{with nearest .Scenario}}<br><small>{{.}}</small>{{end}}</td></tr>
{{end}}</table>
{{range .Sets}}<h2 id="{{.ID}}">{{.Scenario.Name}}</h2>
{{if .Scenario.Skipped}}<p>Skipped: {{.Scenario.Skipped}}</p>{{else}}
<p>{{.Scenario.Claim}}</p>
<div class="verdict {{cls .Scenario}}"><b>{{status .Scenario}}</b>{{if ne (print (status .Scenario)) .Scenario.Summary}}: {{.Scenario.Summary}}{{end}} ({{.Scenario.Pairs}} pairs){{if .Scenario.Calibration}}<br>calibration: {{.Scenario.Calibration}}{{end}}
{{$sc := .Scenario}}<ul>{{range .Scenario.Checks}}<li class="{{ccls .}}">{{cline .}}{{with todecide $sc .}}<br><small>{{.}}</small>{{end}}</li>{{end}}</ul></div>
{{.Table}}
{{range .Scenario.Notes}}<p><small>note: {{.}}</small></p>{{end}}
<div class="plots">{{range .Plots}}<div>{{.}}</div>{{end}}</div>
{{end}}{{end}}
</body></html>
`

func svg(p *plot.Plot) (template.HTML, error) { return svgSized(p, 5.5*vg.Inch, 3.8*vg.Inch) }

func svgSized(p *plot.Plot, w, h vg.Length) (out template.HTML, err error) {
	// A plot that cannot be drawn (gonum panics, e.g. a log axis with no
	// positive value) costs its place on the page, never the report.
	defer func() {
		if r := recover(); r != nil {
			out, err = template.HTML("<p><small>plot not drawn: "+template.HTMLEscapeString(fmt.Sprint(r))+"</small></p>"), nil
		}
	}()
	wt, err := p.WriterTo(w, h, "svg")
	if err != nil {
		return "", err
	}
	var b bytes.Buffer
	if _, err := wt.WriteTo(&b); err != nil {
		return "", err
	}
	s := b.String()
	if i := strings.Index(s, "<svg"); i > 0 {
		s = s[i:] // drop the XML prolog for inline use
	}
	return template.HTML(s), nil
}

// latencyPlot is a plot with latency in ms on a log Y axis and the legend
// top left, the frame of every latency plot of the report.
func latencyPlot(title, xLabel string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xLabel
	p.Y.Label.Text = "latency (ms)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = msTicks{}
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.TextStyle.Font.Size = vg.Points(8)
	return p
}

// percentilePlot: latency (ms, log) against percentile on the HdrHistogram
// "1/(1-q)" axis, one line per variant.
func percentilePlot(s *Scenario, title string, vs []*Variant) (template.HTML, error) {
	p := latencyPlot(title+": latency by percentile", "percentile")
	p.X.Tick.Marker = percentileTicks{}
	var args []any
	for _, v := range vs {
		var pts plotter.XYs
		for _, q := range []float64{10, 25, 50, 75, 90, 95, 99, 99.5, 99.9} {
			y := float64(v.hist.ValueAtQuantile(q)) / 1e3
			pts = append(pts, plotter.XY{X: math.Log10(100 / (100 - q)), Y: math.Max(y, 0.001)})
		}
		args = append(args, v.Name, pts)
	}
	if len(args) == 0 {
		return "", nil // nothing measured (every variant invalid): no plot
	}
	if err := plotutil.AddLinePoints(p, args...); err != nil {
		return "", err
	}
	p.X.Max += 0.2 // room for the last tick's label
	return svg(p)
}

// overTimePlot: the p99 of each 100 ms window against time since the
// variant's start (repeats overlaid), one line per variant.
func overTimePlot(s *Scenario, title string, vs []*Variant) (template.HTML, error) {
	p := latencyPlot(title+": p99 per 100 ms", "seconds since start (repeats overlaid)")
	var args []any
	for _, v := range vs {
		windows := map[int][]float64{}
		last := 0
		for _, pt := range v.Series {
			w := int(pt[0] * 10)
			windows[w] = append(windows[w], pt[1])
			last = max(last, w)
		}
		var pts plotter.XYs
		for w := 0; w <= last; w++ {
			xs := windows[w]
			if len(xs) == 0 {
				continue
			}
			slices.Sort(xs)
			q := xs[min(len(xs)-1, int(math.Ceil(0.99*float64(len(xs))))-1)]
			pts = append(pts, plotter.XY{X: (float64(w) + 0.5) / 10, Y: math.Max(q*1e3, 0.001)})
		}
		if len(pts) > 0 {
			args = append(args, v.Name, pts)
		}
	}
	if len(args) == 0 {
		return "", nil
	}
	if err := plotutil.AddLines(p, args...); err != nil {
		return "", err
	}
	return svg(p)
}

// cpuPlot: CPU seconds used per variant.
func cpuPlot(s *Scenario) (template.HTML, error) {
	p := plot.New()
	p.Title.Text = s.Name + ": CPU time used"
	var vals plotter.Values
	var names []string
	for _, v := range s.Variants {
		vals = append(vals, v.CPU)
		names = append(names, v.Name)
	}
	// Horizontal bars: every variant's name is readable, however many.
	bars, err := plotter.NewBarChart(vals, vg.Points(9))
	if err != nil {
		return "", err
	}
	bars.Horizontal = true
	bars.Color = plotutil.Color(0)
	p.Add(bars)
	p.NominalY(names...)
	p.Y.Label.Text = ""
	p.X.Label.Text = "CPU seconds (all repeats)"
	p.Y.Tick.Label.Font.Size = vg.Points(8)
	return svgSized(p, 5.5*vg.Inch, max(3*vg.Inch, vg.Length(len(names))*0.17*vg.Inch+vg.Inch))
}

// splitVariants are s's variants whose p99 tasks' split was recorded.
func splitVariants(s *Scenario) []*Variant {
	var out []*Variant
	for _, v := range s.Variants {
		if v.Extra["split_tasks"] > 0 {
			out = append(out, v)
		}
	}
	return out
}

// splitPlot draws, per cpuwork variant with accounted tasks, where its p99
// tasks' latency went: one horizontal bar per variant, stacked by part
// (cpuwork.Options.Account; split.go).
func splitPlot(s *Scenario) (template.HTML, bool, error) {
	vs := splitVariants(s)
	if len(vs) == 0 {
		return "", false, nil
	}
	p := plot.New()
	p.Title.Text = s.Name + ": where the p99 tasks' time went"
	var names []string
	for _, v := range vs {
		names = append(names, v.Name)
	}
	var below *plotter.BarChart
	for part := range account.Part(account.NumParts) {
		var vals plotter.Values
		for _, v := range vs {
			vals = append(vals, v.Extra[splitKey(part)]*1000)
		}
		bars, err := plotter.NewBarChart(vals, vg.Points(9))
		if err != nil {
			return "", false, err
		}
		bars.Horizontal = true
		bars.Color = plotutil.Color(int(part))
		bars.LineStyle.Width = 0
		if below != nil {
			bars.StackOn(below)
		}
		below = bars
		p.Add(bars)
		p.Legend.Add(part.String(), bars)
	}
	// The legend right of the bars, outside the plotting area.
	p.Legend.Top = true
	p.Legend.Left = false
	p.Legend.XOffs = vg.Points(0)
	p.Legend.TextStyle.Font.Size = vg.Points(7)
	p.X.Max *= 1.35 // room for the legend beside the longest bar
	p.NominalY(names...)
	p.Y.Label.Text = ""
	p.X.Label.Text = "ms: mean of each run's slowest 1 % of tasks"
	p.Y.Tick.Label.Font.Size = vg.Points(8)
	out, err := svgSized(p, 5.5*vg.Inch, max(3*vg.Inch, vg.Length(len(names))*0.22*vg.Inch+1.5*vg.Inch))
	return out, true, err
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

// msLabel writes a value in milliseconds in human units: "0.5", "20",
// "1.5 s" (never "1.5e+03").
func msLabel(v float64) string {
	if v >= 1000 {
		return strconv.FormatFloat(v/1000, 'f', -1, 64) + " s"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

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
				t = append(t, plot.Tick{Value: v, Label: msLabel(v)})
			}
		}
	}
	return t
}

// toDecide says, for an inconclusive comparison c of s, how many pairs and
// minutes deciding it would take here and the command that runs them
// ("" for any other).
func toDecide(s *Scenario, c CheckResult) string {
	if c.PairsToDecide == 0 {
		return ""
	}
	if c.PairsToDecide >= maxPairsToDecide {
		return "cannot tell here: more than 1,000 pairs at this run's spread"
	}
	return fmt.Sprintf("cannot tell here in this run: about %d pairs%s at this run's spread: cpuwork bench --scenario %s --repeat %d",
		c.PairsToDecide, pairsTime(s, c.PairsToDecide, " / %s"), s.Name, c.PairsToDecide)
}

// nearestDecision says, for a scenario whose status is inconclusive, how
// long deciding it would take here: the inconclusive comparison that
// needs the fewest pairs at the run's spread, with the minutes at the
// scenario's own time per pair ("" for any other status).
func nearestDecision(s *Scenario) string {
	if status(s) != StatusInconclusive {
		return ""
	}
	var best *CheckResult
	for i := range s.Checks {
		c := &s.Checks[i]
		if c.PairsToDecide > 0 && (best == nil || c.PairsToDecide < best.PairsToDecide) {
			best = c
		}
	}
	switch {
	case best == nil:
		return ""
	case best.PairsToDecide >= maxPairsToDecide:
		return "cannot be decided here (more than 1,000 pairs each)"
	}
	return fmt.Sprintf("cannot tell in this run; about %d pairs%s would decide %q",
		best.PairsToDecide, pairsTime(s, best.PairsToDecide, " (%s here)"), best.Label)
}

// pairsTime is format with how long n pairs of s take at its own time
// per pair, or "" when s has no time per pair.
func pairsTime(s *Scenario, n int, format string) string {
	if s.Pairs <= 0 || s.DurationS <= 0 {
		return ""
	}
	return fmt.Sprintf(format, howLong(s.DurationS/float64(s.Pairs)*float64(n)))
}

// howLong prints a duration of sec seconds as seconds under a minute,
// else minutes, else hours.
func howLong(sec float64) string {
	switch {
	case sec < 60:
		return fmt.Sprintf("%.0f s", sec)
	case sec < 3600:
		return fmt.Sprintf("%.0f min", sec/60)
	}
	return fmt.Sprintf("%.1f h", sec/3600)
}

// vsBaseline is v's p99 over the baseline's, or "-" where the variant has
// no baseline to compare with (a run beside a neighbour or under a quota
// whose baseline did not run there).
func vsBaseline(v *Variant) string {
	r, ok := v.Ratio["p99"]
	if !ok || r == 0 || math.IsNaN(r) || math.IsInf(r, 0) {
		return "-"
	}
	return fmt.Sprintf("%.3fx", r)
}

// Legend says, once before the tables, what the bench's names and
// columns mean, in the words README defines.
const Legend = `How to read this (docs/bench.md has the rest):
  variant names: X-aa is a second copy of X run in the same rounds (the A/A control: how far two identical runs differ gives the margin); +nice0 runs beside a CPU-bound process at nice 0, the default priority; +quota1.5 in a 1.5-CPU cgroup; @80%, @200% at an open-loop load of 80 % and twice the capacity
  C1-C5: the field reports (docs/claims.md) a scenario reproduces; "goal": what cpuwork aims at, a figure, not a verdict
  goodput within the objective: CPU-seconds of work per second done by requests answered within their latency objective; p99 of served counts answered requests, p99 of all counts a refused one as never answered
  gen. late p99: how late the load generator itself sent (its own lag, apart from the service's); floor: the best any variant can do here (no batch work at all)
  Bonferroni: an interval's end widened because the best of several alternatives was chosen on the same pairs
`
