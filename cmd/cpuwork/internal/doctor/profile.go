package doctor

import (
	"context"
	"fmt"
	"io"
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
}

var schedulerFuncs = []string{"runtime.schedule", "runtime.findRunnable", "runtime.findrunnable", "runtime.stealWork", "runtime.runqgrab"}

// fetchProfile reads d of CPU profile from the target's net/http/pprof.
func fetchProfile(ctx context.Context, base string, d time.Duration) (*ProfileView, error) {
	u, body, err := pprofGet(ctx, base, "profile", d)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	v, err := readProfile(body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", u, err)
	}
	return v, nil
}

// readProfile parses a CPU profile (gzip-compressed or not), reading at
// most maxProfileBody bytes of it and maxProfileData decompressed.
func readProfile(r io.Reader) (*ProfileView, error) {
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
	var sched, preempt int64
	for _, s := range p.Sample {
		n := s.Value[idx]
		v.Samples += n
		inSched, inPreempt := false, false
		for _, loc := range s.Location {
			for _, l := range loc.Line {
				if l.Function == nil {
					continue
				}
				name := l.Function.Name
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
	}
	if v.Samples > 0 {
		v.SchedulerShare = float64(sched) / float64(v.Samples)
		v.PreemptShare = float64(preempt) / float64(v.Samples)
	}
	return v, nil
}
