package goroutine

import (
	"context"
	"runtime/pprof"
	"unsafe"
)

// ProfLabels returns the calling goroutine's profiler label set (nil:
// none), and SetProfLabels replaces it, through the two hooks
// runtime/pprof itself uses (runtime_getProfLabel and
// runtime_setProfLabel in runtime/proflabel.go, which the Go project
// keeps for the packages that link to them). They are here, beside the
// goroutine's identity, because they buy the executor what its public
// API cannot: runtime/pprof cannot read a goroutine's labels, so putting
// them back after a task would mean carrying the submitter's labels in
// a context and asking whether that context has any (a walk of its
// whole chain) on every task; a task's labels through the hooks are a
// load and two stores of a precomputed set (BenchmarkIdentityLabels* in
// the executor's package measure both).
func ProfLabels() unsafe.Pointer { return getProfLabel() }

// SetProfLabels makes labels (a set ProfLabels returned) the calling
// goroutine's profiler labels.
func SetProfLabels(labels unsafe.Pointer) { setProfLabel(labels) }

//go:linkname getProfLabel runtime/pprof.runtime_getProfLabel
func getProfLabel() unsafe.Pointer

//go:linkname setProfLabel runtime/pprof.runtime_setProfLabel
func setProfLabel(labels unsafe.Pointer)

// LabelSet returns the label set of a context with the one label
// key=value, as the goroutine holds it, for TaskLabels.
func LabelSet(key, value string) unsafe.Pointer {
	old := getProfLabel()
	pprof.SetGoroutineLabels(pprof.WithLabels(context.Background(), pprof.Labels(key, value)))
	set := getProfLabel()
	setProfLabel(old)
	return set
}

// TaskLabels gives the calling goroutine, about to run a task submitted
// with ctx, the task's labels and returns the set to put back after it.
// On the submitter's goroutine (onCaller) the labels are the goroutine's:
// when it has none, set (LabelSet(key, value)) alone; else ctx's plus
// key=value (pprof.Do sets both the same; one allocation). Elsewhere (a
// worker) they are ctx's plus key=value, set alone when ctx has none.
func TaskLabels(ctx context.Context, set unsafe.Pointer, onCaller bool, key, value string) (restore unsafe.Pointer) {
	old := getProfLabel()
	if onCaller && old == nil || !onCaller && !HasLabels(ctx) {
		setProfLabel(set)
		return old
	}
	pprof.SetGoroutineLabels(pprof.WithLabels(ctx, pprof.Labels(key, value)))
	return old
}

// HasLabels reports whether ctx carries profiler labels.
func HasLabels(ctx context.Context) bool {
	has := false
	pprof.ForLabels(ctx, func(string, string) bool { has = true; return false })
	return has
}
