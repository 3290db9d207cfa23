package cpuwork

import (
	"context"
	"runtime/pprof"
	"unsafe"

	"github.com/cpuwork/cpuwork/internal/goroutine"
)

// Profiler labels. A task runs with cpuwork.class=<class> added to the
// profiler labels of its submission (profiles split with `go tool pprof
// -tagfocus cpuwork.class=batch`), and its goroutine's labels are put
// back when it ends.
//
// The goroutine's label set is read and written through the runtime's
// own hooks (internal/goroutine, which says why).

// initLabels makes each class's label set (e.labels, e.classLabels):
// the contexts keep the sets alive, the pointers are what the goroutine
// holds while a task of the class runs.
func (e *Executor) initLabels() {
	old := goroutine.ProfLabels()
	for c := range Class(numClasses) {
		e.labels[c] = pprof.WithLabels(context.Background(), pprof.Labels(labelKey, c.String()))
		pprof.SetGoroutineLabels(e.labels[c])
		e.classLabels[c] = goroutine.ProfLabels()
	}
	goroutine.SetProfLabels(old)
}

// setLabels gives the calling goroutine, about to run t, its task's
// labels and returns the set to restore when t ends (the goroutine's
// own). On the submitter's goroutine (onCaller) the labels are the
// goroutine's: none (the class's set alone, precomputed) or, when it has
// some, ctx's plus the class (pprof.Do sets both the same; one
// allocation). On a worker or the critical lane they are ctx's plus the
// class, the class's set alone when ctx has none.
func (e *Executor) setLabels(t *task, onCaller bool) (restore unsafe.Pointer) {
	old := goroutine.ProfLabels()
	if onCaller && old == nil || !onCaller && !hasLabels(t.ctx) {
		goroutine.SetProfLabels(e.classLabels[t.class])
		return old
	}
	pprof.SetGoroutineLabels(pprof.WithLabels(t.ctx, pprof.Labels(labelKey, t.class.String())))
	return old
}

// hasLabels reports whether ctx carries profiler labels.
func hasLabels(ctx context.Context) bool {
	has := false
	pprof.ForLabels(ctx, func(string, string) bool { has = true; return false })
	return has
}
