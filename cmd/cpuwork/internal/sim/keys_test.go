package sim

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/cpuwork/cpuwork/internal/admission"
)

// hostileKeys builds the hostile-key workload: on 2 slots with a 100 ms
// objective, a flood at 2x capacity of 10 ms requests beside a light
// client at a tenth of it, for 8 s, Poisson arrivals. flood names the
// flood's key per request (i its index); light is the light client's.
func hostileKeys(flood func(i int) string, light string) *Workload {
	const d = 8 * time.Second
	cpu := 10 * time.Millisecond
	w := &Workload{Name: "hostile keys", Slots: 2, Duration: d, Targets: true}
	w.Objective[admission.Interactive] = 100 * time.Millisecond
	rng := rand.New(rand.NewPCG(78, 1))
	capacity := float64(w.Slots) / cpu.Seconds()
	var reqs []Request
	for i, t := 0, time.Duration(0); ; i++ {
		t += time.Duration(rng.ExpFloat64() / (2 * capacity) * 1e9)
		if t >= d {
			break
		}
		reqs = append(reqs, Request{At: t, Class: admission.Interactive, CPU: cpu, Kind: "flood", Key: flood(i)})
	}
	for t := time.Duration(0); ; {
		t += time.Duration(rng.ExpFloat64() / (0.1 * capacity) * 1e9)
		if t >= d {
			break
		}
		reqs = append(reqs, Request{At: t, Class: admission.Interactive, CPU: cpu, Kind: "light", Key: light})
	}
	sortRequests(reqs)
	w.Requests = reqs
	return w
}

func kindOf(r *Result, kind string) Group {
	for _, g := range r.Groups {
		if g.Kind == kind {
			return g
		}
	}
	return Group{}
}

// A flood cannot turn the key shares against a light client by making
// up keys: with the flood sending a new key per request (or cycling
// through 64), the light client is refused no more than with the flood
// unkeyed, plus 5 points, whether it carries a key or not (a keyed light
// client earns its share once served from the queue; an unkeyed one
// shares the pool with the made-up keys, as with an unkeyed flood). The
// admission code replayed exactly on a virtual clock (cpuwork's Granter).
func TestAFloodThatRotatesKeysIsNotSparedTheShedding(t *testing.T) {
	floods := []struct {
		name string
		key  func(int) string
	}{
		{"unkeyed", func(int) string { return "" }},
		{"on one key", func(int) string { return "flood" }},
		{"a new key per request", func(i int) string { return fmt.Sprint("f", i) }},
	}
	for _, light := range []string{"light", ""} {
		var base float64
		for i, f := range floods {
			r, err := Run(hostileKeys(f.key, light), "cpuwork")
			if err != nil {
				t.Fatal(err)
			}
			l, fl := kindOf(r, "light"), kindOf(r, "flood")
			t.Logf("light client key %q, flood %s: light refused %.1f %% (%d of %d); flood served %d, refused %.1f %%",
				light, f.name, 100*l.Shed(), l.Refused+l.Expired, l.Requests, fl.Served, 100*fl.Shed())
			if i == 0 {
				base = l.Shed()
				continue
			}
			if l.Shed() > base+0.05 {
				t.Errorf("light client key %q, flood %s: refused %.1f %%, want at most the %.1f %% it is refused beside an unkeyed flood + 5 points",
					light, f.name, 100*l.Shed(), 100*base)
			}
		}
		// Not an attack the shares can stop: 64 keys that have each been
		// served are 64 sharers, and the light client (0.2 slot-s/s)
		// is past its share of 2/65 slots. Logged, as the guide says:
		// keys must be authenticated and bounded.
		if r, err := Run(hostileKeys(func(i int) string { return fmt.Sprint("f", i%64) }, light), "cpuwork"); err == nil {
			l := kindOf(r, "light")
			t.Logf("light client key %q, flood on 64 keys each served: light refused %.1f %% (%d of %d)", light, 100*l.Shed(), l.Refused+l.Expired, l.Requests)
		}
		if light != "" && base > 0.05 {
			t.Errorf("a keyed light client beside an unkeyed flood: refused %.1f %%, want at most 5 %% (its first tasks, before it earns its share)", 100*base)
		}
	}
}

func sortRequests(rs []Request) {
	slices.SortStableFunc(rs, func(a, b Request) int { return cmp.Compare(a.At, b.At) })
}
