package sim

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Worse is the ratio to the best peer's figure under which a cpuwork
// mode is counted worse in a cell. A replay is exact, so no interval
// is needed; the threshold is the one the matrix's targets name.
const Worse = 0.98

// Judgement is one of cpuwork's modes in one cell.
type Judgement struct {
	Cell     *CellResult
	Mode     string  // cpuwork or cpuwork-target
	Ratio    float64 // the cell's primary figure, cpuwork's over the best peer's (1 when both are 0)
	VsLimit  float64 // open-loop goodput over the clairvoyant limit's (1 when it is 0)
	PeerRoom bool    // the best peer's goodput is under 0.90x the limit's: room for a policy to matter
}

// Judge judges each cpuwork mode run in each cell.
func Judge(res []CellResult, modes []string) []Judgement {
	var out []Judgement
	for i := range res {
		c := &res[i]
		for _, mode := range modes {
			if _, ok := c.Results[mode]; !ok {
				continue
			}
			j := Judgement{Cell: c, Mode: mode, Ratio: ratio(c.Primary(mode), c.Primary(c.BestPeer)), VsLimit: ratio(c.Results[mode].Goodput, c.Limit)}
			j.PeerRoom = ratio(c.Results[c.BestPeer].Goodput, c.Limit) < 0.90
			out = append(out, j)
		}
	}
	return out
}

func ratio(a, b float64) float64 {
	switch {
	case b == 0 && a == 0:
		return 1
	case b == 0:
		return math.Inf(1)
	}
	return a / b
}

// WriteMatrixJSON writes every cell as a JSON array.
func WriteMatrixJSON(w io.Writer, res []CellResult) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", " ")
	return enc.Encode(res)
}

// WriteMatrixReport prints the matrix's answers: what ran, a table per
// dimension, the targets, and every cell where a cpuwork mode is worse
// than the best peer.
func WriteMatrixReport(w io.Writer, m *Matrix, res []CellResult, elapsed time.Duration) {
	writeMatrixHeader(w, m, elapsed)
	var modes []string
	for _, p := range m.Policies {
		if strings.HasPrefix(p, "cpuwork") {
			modes = append(modes, p)
		}
	}
	js := Judge(res, modes)
	fmt.Fprintf(w, "\nThe question of every cell: goodput within the objective (CPU-s of work per s; in a tenants cell the nine honest tenants'), cpuwork over the best peer for that cell; worse under %.2fx.\n", Worse)
	writeDimensionTables(w, m, js, modes)
	fmt.Fprintf(w, "\nThe targets:\n")
	fmt.Fprintf(w, "A size-blind policy (every modelled peer, and cpuwork without a declared run time) starts a request without seeing its CPU time and runs it to its end: of the CPU it spends, the share spent on requests longer than their objective on their own (their share of the offered work, in expectation) never counts. Its bound is the rest of the CPU it can spend, allowing three standard errors of luck in which requests it drew (blind_bound in the JSON; policies above it here: %d of %d in all cells); a target that needs more cannot be met by such a policy and is counted apart.\n", aboveBlind(res), len(res)*len(m.Policies))
	writeTargets(w, js, modes)
	writeWorseCells(w, js)
}

// writeMatrixHeader says what ran: the cells, their trims, the time.
func writeMatrixHeader(w io.Writer, m *Matrix, elapsed time.Duration) {
	cells, trimmed := m.Cells()
	fmt.Fprintf(w, "The declared matrix: %d cells (%d slot counts x %d shapes x %d loads x %d mixes x %d objectives, less the trims), each through %s and the clairvoyant limit; %d open-loop requests a cell, median service time %v. A replay is exact: the same cell gives the same figures on any machine, so no intervals are printed.\n",
		len(cells), len(m.Slots), len(m.Shapes), len(m.Loads), len(m.Mixes), len(m.Objectives), strings.Join(m.Policies, ", "), m.Requests, m.Median)
	for i, t := range m.Trims {
		var conds []string
		for _, k := range []string{"slots", "shape", "load", "mix", "objective"} {
			if vs, ok := t.When[k]; ok {
				conds = append(conds, k+"="+strings.Join(vs, ","))
			}
		}
		fmt.Fprintf(w, "  trimmed %d cells where %s: %s\n", trimmed[i], strings.Join(conds, " "), t.Reason)
	}
	if elapsed > 0 {
		fmt.Fprintf(w, "Ran in %.1f s.\n", elapsed.Seconds())
	}
}

// writeDimensionTables prints, per cpuwork mode and dimension, each
// value's cells against the best peer and the limit.
func writeDimensionTables(w io.Writer, m *Matrix, js []Judgement, modes []string) {
	for _, mode := range modes {
		for _, dim := range []string{"slots", "shape", "load", "mix", "objective"} {
			fmt.Fprintf(w, "\n%s by %s:\n", mode, dim)
			tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintf(tw, "%s\tcells\tgeo-mean vs best peer\tlowest\tworse\tvs limit (>= 1.2 load, lowest)\tbest peer, most often\t\n", dim)
			for _, v := range dimValues(m, dim) {
				var rs, lim []float64
				worse := 0
				peers := map[string]int{}
				for _, j := range js {
					if j.Mode != mode || dimOf(j.Cell.Cell, dim) != v {
						continue
					}
					rs = append(rs, j.Ratio)
					if j.Ratio < Worse {
						worse++
					}
					if atLeast(j.Cell.Load, 1.2) {
						lim = append(lim, j.VsLimit)
					}
					peers[j.Cell.BestPeer]++
				}
				if len(rs) == 0 {
					continue
				}
				fmt.Fprintf(tw, "%s\t%d\t%.3fx\t%.3fx\t%d\t%s\t%s\t\n", v, len(rs), geoMean(rs), slices.Min(rs), worse, lowest(lim), mostOften(peers))
			}
			tw.Flush()
		}
	}
}

// writeTargets prints, per cpuwork mode, how many cells miss each of the
// matrix's targets.
func writeTargets(w io.Writer, js []Judgement, modes []string) {
	for _, mode := range modes {
		var t [10]int
		var n [7]int
		for _, j := range js {
			if j.Mode != mode {
				continue
			}
			c := j.Cell
			f := c.Results[mode]
			n[0]++
			if j.Ratio < Worse {
				t[0]++
			}
			if atLeast(c.Load, 1.2) {
				n[1]++
				if j.VsLimit < 0.90 {
					t[1]++
					switch {
					case c.Blind < 0.90*c.Limit:
						t[7]++
					case peerReaches(c, 0.90*c.Limit):
						t[8]++
					}
				}
			}
			if j.PeerRoom && c.Slots >= 2 {
				n[2]++
				if j.Ratio < 1.10 {
					t[2]++
					blind := c.Blind
					if c.Mix == "tenants" {
						blind = c.BlindOthers
					}
					if blind < 1.10*c.Primary(c.BestPeer) {
						t[9]++
					}
				}
			}
			if c.Mix == "one" && !atLeast(c.Load, 0.81) && c.Load != "step" {
				n[3]++
				if f.Refused >= 0.005 {
					t[3]++
				}
				if f.Refused-c.Results["clairvoyant"].Refused >= 0.005 {
					t[6]++
				}
			}
			if c.Mix == "mixed" && c.Load == "0.8" {
				n[4]++
				b := c.Results[c.BestPeer]
				if f.P99Served > b.P99Served || f.BatchWork < 0.9*f.BatchBound {
					t[4]++
				}
			}
			if c.Load == "step" {
				n[5]++
				if f.Recovery > (20*time.Millisecond).Seconds()+2*c.Longest {
					t[5]++
				}
			}
		}
		fmt.Fprintf(w, "  %s: goodput >= %.2fx the best peer's: missed in %d of %d cells\n", mode, Worse, t[0], n[0])
		fmt.Fprintf(w, "  %s: goodput >= 0.90x the limit's at >= 1.2 load: missed in %d of %d cells (in %d no size-blind policy can: its bound is under 0.90x the limit; of the rest, a modelled peer reaches it in %d)\n", mode, t[1], n[1], t[7], t[8])
		fmt.Fprintf(w, "  %s: >= 1.10x the best peer where it is under 0.90x the limit (2 slots or more): missed in %d of %d cells (in %d no size-blind policy can)\n", mode, t[2], n[2], t[9])
		fmt.Fprintf(w, "  %s: refuses < 0.5 %% at <= 0.8 load, one class: missed in %d of %d cells (%d where it refused 0.5 %% or more beyond what the limit refused: requests longer than the objective on their own)\n", mode, t[3], n[3], t[6])
		fmt.Fprintf(w, "  %s: mixed at 0.8, interactive p99 of served <= the best peer's and batch >= 0.9x the work-conserving bound: missed in %d of %d cells\n", mode, t[4], n[4])
		fmt.Fprintf(w, "  %s: after the step to 3x, served p99 under the objective within 20 ms plus two of the longest requests: missed in %d of %d cells\n", mode, t[5], n[5])
	}
}

// aboveBlind counts the cells' policies, cpuwork's modes among them,
// whose open-loop goodput exceeds the cell's size-blind bound.
func aboveBlind(res []CellResult) int {
	n := 0
	for i := range res {
		for name, f := range res[i].Results {
			if name != "clairvoyant" && f.Goodput > res[i].Blind*(1+1e-9) {
				n++
			}
		}
	}
	return n
}

// peerReaches reports whether a modelled peer's open-loop goodput in c
// is at least g.
func peerReaches(c *CellResult, g float64) bool {
	for name, f := range c.Results {
		if name != "clairvoyant" && !strings.HasPrefix(name, "cpuwork") && f.Goodput >= g {
			return true
		}
	}
	return false
}

// writeWorseCells lists every cell where a cpuwork mode is worse than the
// best peer, none left out.
func writeWorseCells(w io.Writer, js []Judgement) {
	fmt.Fprintf(w, "\nEvery cell where cpuwork is worse than the best peer (under %.2fx), none left out:\n", Worse)
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "mode\tcell\tratio\tbest peer\tcpuwork goodput / refused / p99 served\tpeer goodput / refused / p99 served\tlimit\t\n")
	count := 0
	for _, j := range js {
		if j.Ratio >= Worse {
			continue
		}
		count++
		c, b := j.Cell.Results[j.Mode], j.Cell.Results[j.Cell.BestPeer]
		fmt.Fprintf(tw, "%s\t%v\t%.3fx\t%s\t%.3f / %.1f%% / %s\t%.3f / %.1f%% / %s\t%.3f\t\n", j.Mode, j.Cell.Cell, j.Ratio, j.Cell.BestPeer,
			j.Cell.Primary(j.Mode), 100*c.Refused, secs(c.P99Served), j.Cell.Primary(j.Cell.BestPeer), 100*b.Refused, secs(b.P99Served), j.Cell.Limit)
	}
	tw.Flush()
	if count == 0 {
		fmt.Fprintln(w, "  none")
	}
}

func secs(s Seconds) string {
	if math.IsInf(float64(s), 0) || math.IsNaN(float64(s)) {
		return "never"
	}
	return fmt.Sprintf("%.0fms", float64(s)*1000)
}

func dimValues(m *Matrix, dim string) []string {
	var vs []string
	switch dim {
	case "slots":
		for _, n := range m.Slots {
			vs = append(vs, strconv.Itoa(n))
		}
	case "shape":
		vs = m.Shapes
	case "load":
		vs = m.Loads
	case "mix":
		vs = m.Mixes
	case "objective":
		for _, o := range m.Objectives {
			vs = append(vs, strconv.FormatFloat(o, 'g', -1, 64))
		}
	}
	return vs
}

func dimOf(c Cell, dim string) string {
	switch dim {
	case "slots":
		return strconv.Itoa(c.Slots)
	case "shape":
		return c.Shape
	case "load":
		return c.Load
	case "mix":
		return c.Mix
	}
	return strconv.FormatFloat(c.Objective, 'g', -1, 64)
}

// atLeast reports whether a cell's load is at least x ("step" peaks at
// 3x).
func atLeast(load string, x float64) bool {
	if load == "step" {
		return 3 >= x
	}
	l, _ := strconv.ParseFloat(load, 64)
	return l >= x
}

func geoMean(xs []float64) float64 {
	s, n := 0.0, 0
	for _, x := range xs {
		if x > 0 && !math.IsInf(x, 0) {
			s += math.Log(x)
			n++
		}
	}
	if n == 0 {
		return math.NaN()
	}
	return math.Exp(s / float64(n))
}

func lowest(xs []float64) string {
	if len(xs) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.3fx", slices.Min(xs))
}

func mostOften(m map[string]int) string {
	type kv struct {
		k string
		v int
	}
	var kvs []kv
	for k, v := range m {
		kvs = append(kvs, kv{k, v})
	}
	sort.Slice(kvs, func(i, j int) bool { return kvs[i].v > kvs[j].v || kvs[i].v == kvs[j].v && kvs[i].k < kvs[j].k })
	if len(kvs) == 0 {
		return "-"
	}
	return fmt.Sprintf("%s (%d)", kvs[0].k, kvs[0].v)
}
