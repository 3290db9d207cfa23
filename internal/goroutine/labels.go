package goroutine

import (
	"unsafe"
	_ "unsafe" // go:linkname
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
