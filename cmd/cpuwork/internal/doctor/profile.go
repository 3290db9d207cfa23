package doctor

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/google/pprof/profile"
)

// ProfileView is what a CPU profile of the target says about where its CPU
// went: the share spent in the Go scheduler looking for work.
type ProfileView struct {
	Duration time.Duration `json:"duration_ns"`
	Samples  int64         `json:"samples"` // CPU samples (10 ms each by default)
	// SchedulerShare is the share of samples in runtime.schedule /
	// findRunnable and the spinning around them (stealWork, runqgrab,
	// netpoll from the scheduler), not counting samples whose leaf is
	// runtime.asyncPreempt: under OS starvation a preempted goroutine is
	// charged there, a symptom rather than scheduler overhead.
	SchedulerShare float64 `json:"scheduler_share"`
	// PreemptShare is the share of samples with runtime.asyncPreempt.
	PreemptShare float64 `json:"async_preempt_share"`
	// Where the samples outside the runtime were, by their leaf frame:
	// the program's own code (its main module, or package main), the
	// standard library and other modules (Library, the busiest package
	// in TopLibrary), or C called through cgo (Cgo).
	Own, Library, Cgo float64
	TopLibrary        string `json:"top_library,omitempty"`
}

var schedulerFuncs = []string{"runtime.schedule", "runtime.findRunnable", "runtime.findrunnable", "runtime.stealWork", "runtime.runqgrab"}

// fetchProfile reads d of CPU profile from the target's net/http/pprof.
func fetchProfile(ctx context.Context, base, mainModule string, d time.Duration) (*ProfileView, error) {
	u, body, err := pprofGet(ctx, base, "profile", d)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	v, err := readProfileOf(body, mainModule)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", u, err)
	}
	return v, nil
}

// readProfile parses a CPU profile (gzip-compressed or not), reading at
// most maxProfileBody bytes of it and maxProfileData decompressed, with
// every leaf frame counted as the program's own.
func readProfile(r io.Reader) (*ProfileView, error) { return readProfileOf(r, "") }

// pkgOf returns the package path of a Go function name
// ("image/jpeg.(*decoder).idct" -> "image/jpeg").
func pkgOf(fn string) string {
	slash := strings.LastIndexByte(fn, '/')
	if i := strings.IndexByte(fn[slash+1:], '.'); i >= 0 {
		return fn[:slash+1+i]
	}
	return fn
}

// kind classifies a sample by its stack (leaf first): "cgo" when it runs C
// called through cgo, "runtime", "own" for the main module's code
// (mainModule, or package main), else "lib".
func kind(stack []string, mainModule string) (string, string) {
	for _, fn := range stack {
		if strings.HasPrefix(fn, "_Cfunc_") || fn == "runtime.cgocall" || fn == "runtime.asmcgocall" {
			return "cgo", ""
		}
	}
	if len(stack) == 0 {
		return "cgo", "" // no Go frame: C code
	}
	pkg := pkgOf(stack[0])
	switch {
	case pkg == "runtime" || strings.HasPrefix(pkg, "runtime/"):
		return "runtime", ""
	case pkg == "main" || mainModule != "" && (pkg == mainModule || strings.HasPrefix(pkg, mainModule+"/")):
		return "own", ""
	case mainModule == "":
		return "own", ""
	}
	return "lib", pkg
}

// readProfileOf is readProfile for a program whose main module is
// mainModule ("" when unknown: every leaf outside the runtime and cgo
// counts as its own).
func readProfileOf(r io.Reader, mainModule string) (*ProfileView, error) {
	data, err := readProfileData(r)
	if err != nil {
		return nil, err
	}
	p, err := profile.ParseData(data)
	if err != nil {
		return nil, err
	}
	idx := -1
	for i, st := range p.SampleType {
		if st.Type == "samples" {
			idx = i
		}
	}
	if idx < 0 {
		return nil, fmt.Errorf("not a CPU profile (no samples type)")
	}
	v := &ProfileView{Duration: time.Duration(p.DurationNanos)}
	var sched, preempt, own, lib, cgo int64
	libs := map[string]int64{}
	for _, s := range p.Sample {
		n := s.Value[idx]
		v.Samples += n
		inSched, inPreempt := false, false
		var stack []string
		for _, loc := range s.Location {
			for _, l := range loc.Line {
				if l.Function == nil {
					continue
				}
				name := l.Function.Name
				stack = append(stack, name)
				if name == "runtime.asyncPreempt" {
					inPreempt = true
				}
				for _, f := range schedulerFuncs {
					if name == f {
						inSched = true
					}
				}
			}
		}
		if inPreempt {
			preempt += n
		} else if inSched {
			sched += n
		}
		switch k, pkg := kind(stack, mainModule); k {
		case "own":
			own += n
		case "lib":
			lib += n
			libs[pkg] += n
		case "cgo":
			cgo += n
		}
	}
	if v.Samples > 0 {
		v.SchedulerShare = float64(sched) / float64(v.Samples)
		v.PreemptShare = float64(preempt) / float64(v.Samples)
		v.Own, v.Library, v.Cgo = float64(own)/float64(v.Samples), float64(lib)/float64(v.Samples), float64(cgo)/float64(v.Samples)
	}
	var most int64
	for pkg, n := range libs {
		if n > most || n == most && pkg < v.TopLibrary {
			v.TopLibrary, most = pkg, n
		}
	}
	return v, nil
}
