// Package trace is the request trace that `cpuwork simulate --trace`
// replays and the executor's recorder writes: one CSV format, one reader
// (Read) and one writer (Writer).
//
// A trace is a header naming its columns, then one request per line.
// Columns (any order; the first three required):
//
//	arrival_ms     arrival from the trace's start, ms (decimals allowed)
//	class          critical, interactive, batch or background
//	cpu_ms         CPU time the request takes once running, ms (> 0); empty
//	               for a request that never ran (its outcome says why)
//	deadline_ms    the client gives up this long after arrival, ms (empty or 0: never)
//	kind           a label the report groups by (empty: the class's name)
//	key            the request's key (a tenant, a client; the recorder
//	               writes a digest of it); empty: none
//	target_ms      its latency target, from arrival, ms (empty or 0: none)
//	outcome        how it ended where it was recorded: served, refused,
//	               refused-deadline (its target could not be met) or
//	               gave-up (its client left before it ran); empty: unknown
//	queue_wait_ms  its wait for a slot where it was recorded, ms
//	cpu_estimated  1 when cpu_ms is an estimate (the recorder could not
//	               measure the request's own CPU time), else 0 or empty
//
// Durations are written as milliseconds with up to six decimals (exact
// nanoseconds) and read back exactly.
package trace

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cpuwork/cpuwork/internal/admission"
)

// Record is one request of a trace.
type Record struct {
	Arrival   time.Duration // from the trace's start
	Class     admission.Class
	CPU       time.Duration // on a core once running; 0: unknown (it never ran)
	Deadline  time.Duration // the client gives up this long after arrival; 0: never
	Kind      string        // "": the class's name
	Key       string        // "": none
	Target    time.Duration // latency target from arrival; 0: none
	Outcome   Outcome
	QueueWait time.Duration
	// Estimated: CPU is an estimate, not the request's own measure.
	Estimated bool
}

// Outcome is how a recorded request ended.
type Outcome uint8

// The outcomes, as the outcome column names them.
const (
	Unknown         Outcome = iota // ""
	Served                         // "served": it ran (its fn's error, a panic included)
	Refused                        // "refused": a full queue, MaxQueueWait, or Close
	RefusedDeadline                // "refused-deadline": its target or deadline could not be met
	GaveUp                         // "gave-up": its ctx ended before it ran
)

var outcomeNames = [...]string{"", "served", "refused", "refused-deadline", "gave-up"}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// Ran reports whether a request that ended so used CPU time (served or
// unknown).
func (o Outcome) Ran() bool { return o == Served || o == Unknown }

// The bounds of a trace (Read).
const (
	MaxTraceBytes = 256 << 20
	MaxLineBytes  = 4096
	MaxKindBytes  = 64
	MaxKeyBytes   = 64
	MaxKinds      = 1000
	MaxCPU        = time.Hour
	MaxSpan       = 100 * 365 * 24 * time.Hour
)

// Columns are the known columns, in the order Writer writes them.
var Columns = []string{"arrival_ms", "class", "cpu_ms", "deadline_ms", "target_ms", "key", "outcome", "queue_wait_ms", "kind", "cpu_estimated"}

// Read reads a trace: its requests sorted by arrival, and the line of the
// first request that arrives before the one on the line above it (0: the
// trace was in order), so that a caller can say it sorted it. An error
// names the line and the column. The input is bounded: at most
// MaxTraceBytes in all, lines of at most MaxLineBytes, kinds of at most
// MaxKindBytes and at most MaxKinds of them, keys of at most MaxKeyBytes,
// a CPU time of at most MaxCPU, arrivals, deadlines, targets and waits of
// at most MaxSpan, and CPU times that add up to at most MaxSpan. A UTF-8
// byte order mark before the header is skipped.
func Read(r io.Reader) ([]Record, int, error) {
	lr := &lineBound{r: r}
	cr := csv.NewReader(lr)
	cr.FieldsPerRecord = -1
	cr.TrimLeadingSpace = true
	cr.Comment = '#'
	col, err := readHeader(cr, lr)
	if err != nil {
		return nil, 0, err
	}
	var recs []Record
	unsorted := 0
	kinds := map[string]bool{}
	var total time.Duration
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, 0, lr.wrap(err)
		}
		line, _ := cr.FieldPos(0)
		q, err := row{rec: rec, col: col, line: line}.record()
		if err != nil {
			return nil, 0, err
		}
		if total += q.CPU; total > MaxSpan {
			return nil, 0, fmt.Errorf("line %d: the CPU times so far add up to more than %v", line, MaxSpan)
		}
		if !kinds[q.Kind] {
			if len(kinds) == MaxKinds {
				return nil, 0, fmt.Errorf("line %d: kind %s: more than %d kinds (the report has a row per kind)", line, Quote(q.Kind), MaxKinds)
			}
			kinds[strings.Clone(q.Kind)] = true
		}
		if n := len(recs); unsorted == 0 && n > 0 && q.Arrival < recs[n-1].Arrival {
			unsorted = line
		}
		recs = append(recs, q)
	}
	if len(recs) == 0 {
		return nil, 0, errors.New("the trace has a header and no request")
	}
	slices.SortStableFunc(recs, func(a, b Record) int { return int(a.Arrival - b.Arrival) })
	return recs, unsorted, nil
}

// readHeader reads a trace's header: each known column's index.
func readHeader(cr *csv.Reader, lr *lineBound) (map[string]int, error) {
	head, err := cr.Read()
	if err == io.EOF {
		return nil, errors.New("the trace is empty: want a header (arrival_ms,class,cpu_ms[,deadline_ms][,kind]...) and one line per request")
	}
	if err != nil {
		return nil, lr.wrap(err)
	}
	col := map[string]int{}
	for i, h := range head {
		if i == 0 {
			h = strings.TrimPrefix(h, "\ufeff") // what spreadsheets write first
		}
		h = strings.ToLower(strings.TrimSpace(h))
		if !slices.Contains(Columns, h) {
			return nil, fmt.Errorf("line 1: unknown column %s (known: %s)", Quote(h), strings.Join(Columns, ", "))
		}
		if _, dup := col[h]; dup {
			return nil, fmt.Errorf("line 1: column %q twice", h)
		}
		col[h] = i
	}
	for _, need := range []string{"arrival_ms", "class", "cpu_ms"} {
		if _, ok := col[need]; !ok {
			return nil, fmt.Errorf("line 1: no %q column (the header must name arrival_ms, class and cpu_ms)", need)
		}
	}
	return col, nil
}

// row is one request's line of a trace: its fields, the header's
// columns, its line number.
type row struct {
	rec  []string
	col  map[string]int
	line int
}

// field is the named column's value ("" when absent).
func (t row) field(name string) string {
	if i, ok := t.col[name]; ok && i < len(t.rec) {
		return strings.TrimSpace(t.rec[i])
	}
	return ""
}

// ms is the named column as a duration of milliseconds (0 when empty),
// bounded by MaxSpan (cpu_ms: MaxCPU).
func (t row) ms(name string) (time.Duration, error) {
	s := t.field(name)
	if s == "" {
		return 0, nil
	}
	bound := MaxSpan
	if name == "cpu_ms" {
		bound = MaxCPU
	}
	d, ok := parseMS(s)
	if !ok {
		return 0, fmt.Errorf("line %d: %s %s: want a number of milliseconds >= 0", t.line, name, Quote(s))
	}
	if d > bound || d < 0 {
		return 0, fmt.Errorf("line %d: %s %s: at most %v", t.line, name, Quote(s), bound)
	}
	return d, nil
}

// parseMS reads a number of milliseconds >= 0: a plain decimal exactly
// to the nanosecond, else any float (exponents). A value past MaxSpan
// comes back as -1 (out of bounds) with ok true.
func parseMS(s string) (time.Duration, bool) {
	whole, frac, dot := strings.Cut(s, ".")
	if w, err := strconv.ParseUint(whole, 10, 64); err == nil && (!dot || len(frac) <= 6 && allDigits(frac)) {
		if w > uint64(MaxSpan/time.Millisecond) {
			return -1, true
		}
		ns := int64(w) * int64(time.Millisecond)
		if frac != "" {
			f, _ := strconv.ParseInt(frac+strings.Repeat("0", 6-len(frac)), 10, 64)
			ns += f
		}
		return time.Duration(ns), true
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, false
	}
	if v > float64(MaxSpan.Milliseconds()) {
		return -1, true
	}
	return time.Duration(v * 1e6), true
}

func allDigits(s string) bool {
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// record is the row's request, or the error that refuses the line.
func (t row) record() (Record, error) {
	var q Record
	var err error
	if t.field("arrival_ms") == "" {
		return q, fmt.Errorf("line %d: arrival_ms \"\": want a number of milliseconds >= 0", t.line)
	}
	if q.Arrival, err = t.ms("arrival_ms"); err != nil {
		return q, err
	}
	if q.Outcome, err = t.outcome(); err != nil {
		return q, err
	}
	if q.CPU, err = t.ms("cpu_ms"); err != nil {
		return q, err
	}
	if q.CPU <= 0 && (q.Outcome.Ran() || t.field("cpu_ms") != "") {
		return q, fmt.Errorf("line %d: cpu_ms %s: must be > 0 (empty only for a request whose outcome says it never ran)", t.line, Quote(t.field("cpu_ms")))
	}
	for _, f := range []struct {
		name string
		d    *time.Duration
	}{{"deadline_ms", &q.Deadline}, {"target_ms", &q.Target}, {"queue_wait_ms", &q.QueueWait}} {
		if *f.d, err = t.ms(f.name); err != nil {
			return q, err
		}
	}
	if q.Class, err = ParseClass(t.field("class")); err != nil {
		if len(t.field("class")) > 32 {
			return q, fmt.Errorf("line %d: class %s: want critical, interactive, batch or background", t.line, Quote(t.field("class")))
		}
		return q, fmt.Errorf("line %d: %w", t.line, err)
	}
	q.Kind = t.field("kind")
	if len(q.Kind) > MaxKindBytes {
		return q, fmt.Errorf("line %d: kind %s: at most %d bytes", t.line, Quote(q.Kind), MaxKindBytes)
	}
	switch e := t.field("cpu_estimated"); e {
	case "", "0":
	case "1":
		q.Estimated = true
	default:
		return q, fmt.Errorf("line %d: cpu_estimated %s: want 1, 0 or empty", t.line, Quote(e))
	}
	q.Key = t.field("key")
	if len(q.Key) > MaxKeyBytes {
		return q, fmt.Errorf("line %d: key %s: at most %d bytes", t.line, Quote(q.Key), MaxKeyBytes)
	}
	return q, nil
}

// outcome reads the outcome column.
func (t row) outcome() (Outcome, error) {
	s := strings.ToLower(t.field("outcome"))
	for i, n := range outcomeNames {
		if s == n {
			return Outcome(i), nil
		}
	}
	return 0, fmt.Errorf("line %d: outcome %s: want served, refused, refused-deadline, gave-up or empty", t.line, Quote(s))
}

// ParseClass reads a class name.
func ParseClass(s string) (admission.Class, error) {
	for c := range admission.Class(admission.NumClasses) {
		if strings.EqualFold(s, c.String()) {
			return c, nil
		}
	}
	return 0, fmt.Errorf("class %q: want critical, interactive, batch or background", s)
}

// lineBound reads r, failing once it has given MaxTraceBytes or a line
// grows past MaxLineBytes; line is the line being read (from 1).
type lineBound struct {
	r         io.Reader
	n, inLine int
	line      int
	err       error
}

func (b *lineBound) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.r.Read(p)
	for i := 0; i < n; i++ {
		if b.line == 0 {
			b.line = 1
		}
		b.n++
		b.inLine++
		switch {
		case b.n > MaxTraceBytes:
			b.err = fmt.Errorf("line %d: the trace is longer than %d MiB", b.line, MaxTraceBytes>>20)
		case b.inLine > MaxLineBytes:
			b.err = fmt.Errorf("line %d: longer than %d bytes", b.line, MaxLineBytes)
		case p[i] == '\n':
			b.line++
			b.inLine = 0
			continue
		default:
			continue
		}
		return i, b.err
	}
	return n, err
}

// wrap returns the bound's own error for err, a read's, when the bound
// caused it.
func (b *lineBound) wrap(err error) error {
	if b.err != nil {
		return b.err
	}
	return err
}

// Quote quotes s for an error, cut to its first 32 bytes.
func Quote(s string) string {
	if len(s) > 32 {
		return strconv.Quote(s[:32]) + fmt.Sprintf("… (%d bytes)", len(s))
	}
	return strconv.Quote(s)
}

// Writer writes records as a trace: the header (every column of
// Columns) before the first record.
type Writer struct {
	cw     *csv.Writer
	header bool
	row    []string
}

// NewWriter returns a Writer to w; call Flush at the end.
func NewWriter(w io.Writer) *Writer { return &Writer{cw: csv.NewWriter(w)} }

// Write writes r as one line. A kind or key longer than its bound, a
// class out of range or a negative duration is an error, and nothing of
// r is written.
func (w *Writer) Write(r Record) error {
	switch {
	case int(r.Class) >= admission.NumClasses:
		return fmt.Errorf("class %d: out of range", r.Class)
	case len(r.Kind) > MaxKindBytes || len(r.Key) > MaxKeyBytes:
		return fmt.Errorf("kind %s or key %s: at most %d bytes", Quote(r.Kind), Quote(r.Key), MaxKindBytes)
	case r.Arrival < 0 || r.CPU < 0 || r.Deadline < 0 || r.Target < 0 || r.QueueWait < 0:
		return errors.New("a negative duration")
	case r.CPU == 0 && r.Outcome.Ran():
		return fmt.Errorf("outcome %q with no CPU time", r.Outcome)
	case int(r.Outcome) >= len(outcomeNames):
		return fmt.Errorf("%v: unknown", r.Outcome)
	}
	if !w.header {
		if err := w.cw.Write(Columns); err != nil {
			return err
		}
		w.header = true
	}
	cpu := ""
	if r.CPU > 0 {
		cpu = FormatMS(r.CPU)
	}
	w.row = append(w.row[:0], FormatMS(r.Arrival), r.Class.String(), cpu, optMS(r.Deadline), optMS(r.Target),
		r.Key, r.Outcome.String(), FormatMS(r.QueueWait), r.Kind, map[bool]string{true: "1"}[r.Estimated])
	return w.cw.Write(w.row)
}

// Flush writes what is buffered; its error is the first write's that
// failed.
func (w *Writer) Flush() error {
	w.cw.Flush()
	return w.cw.Error()
}

// FormatMS writes d (>= 0) as milliseconds with up to six decimals:
// exact to the nanosecond.
func FormatMS(d time.Duration) string {
	ms, ns := int64(d)/1e6, int64(d)%1e6
	if ns == 0 {
		return strconv.FormatInt(ms, 10)
	}
	return strings.TrimRight(fmt.Sprintf("%d.%06d", ms, ns), "0")
}

// optMS is FormatMS, empty for 0.
func optMS(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return FormatMS(d)
}

// SizeUnknown gives each request that never ran (CPU 0) the median CPU
// time of the requests of its class that ran (of every request that ran,
// when none of its class did), and returns how many it sized. An error
// when no request ran: nothing to size them by.
func SizeUnknown(recs []Record) (int, error) {
	var byClass [admission.NumClasses][]time.Duration
	var all []time.Duration
	missing := 0
	for _, r := range recs {
		if r.CPU > 0 {
			byClass[r.Class] = append(byClass[r.Class], r.CPU)
			all = append(all, r.CPU)
		} else {
			missing++
		}
	}
	if missing == 0 {
		return 0, nil
	}
	if len(all) == 0 {
		return 0, errors.New("no request of the trace ran: no CPU time to size the others by")
	}
	median := func(d []time.Duration) time.Duration {
		slices.Sort(d)
		return d[len(d)/2]
	}
	m := median(all)
	var med [admission.NumClasses]time.Duration
	for c := range med {
		med[c] = m
		if len(byClass[c]) > 0 {
			med[c] = median(byClass[c])
		}
	}
	for i := range recs {
		if recs[i].CPU == 0 {
			recs[i].CPU = med[recs[i].Class]
		}
	}
	return missing, nil
}
