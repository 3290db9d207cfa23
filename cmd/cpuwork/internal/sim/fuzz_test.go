package sim

import (
	"strings"
	"testing"
	"time"
)

// FuzzReadCSV: any text is read or refused with an error, never a panic;
// what is read replays through every policy with every request ending
// exactly one way.
func FuzzReadCSV(f *testing.F) {
	f.Add("arrival_ms,class,cpu_ms,deadline_ms,kind\n0,interactive,2,50,small\n0.5,critical,0.1,,\n1,batch,20,,big\n")
	f.Add("class,cpu_ms,arrival_ms\nbackground,1e3,1e-3\n")
	f.Add("arrival_ms,class,cpu_ms\n\"0\",Batch,1\n")
	f.Fuzz(func(t *testing.T, in string) {
		reqs, err := ReadCSV(strings.NewReader(in))
		if err != nil {
			return
		}
		if len(reqs) > 200 {
			reqs = reqs[:200]
		}
		for i := range reqs { // keep a replay short
			reqs[i].At = min(reqs[i].At, time.Second)
			reqs[i].CPU = min(reqs[i].CPU, 10*time.Millisecond)
			reqs[i].Deadline = min(reqs[i].Deadline, time.Second)
		}
		wl := &Workload{Slots: 2, Duration: time.Second, Requests: reqs, Targets: true, Declared: true}
		wl.Objective[1] = 20 * time.Millisecond
		if len(in)%2 == 1 {
			wl.Quota = 1.5 // a CFS quota's freezes (quota.go)
		}
		for _, p := range Policies {
			r, err := Run(wl, p.Name)
			if err != nil {
				t.Fatalf("%s: %v", p.Name, err)
			}
			n := 0
			for _, g := range r.Classes {
				if g.Served+g.Refused+g.Expired != g.Requests {
					t.Fatalf("%s, %s: %+v", p.Name, g.Kind, g)
				}
				n += g.Requests
			}
			if n != len(reqs) {
				t.Fatalf("%s: %d requests counted of %d", p.Name, n, len(reqs))
			}
		}
	})
}
