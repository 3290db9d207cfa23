package bench

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func TestStepPacerTimesEachPhaseAsTheConstantPacer(t *testing.T) {
	p := stepPacer{from: 10, to: 40, at: time.Second}
	for _, c := range []struct {
		n    uint64
		want time.Duration
	}{
		{0, 100 * time.Millisecond},
		{9, time.Second},
		{10, time.Second + 25*time.Millisecond},
		{49, 2 * time.Second},
	} {
		if got := p.sendAt(c.n); got != c.want {
			t.Errorf("hit %d due at %v, want %v", c.n, got, c.want)
		}
	}
	if w, stop := p.Pace(1010*time.Millisecond, 10); stop || w != 15*time.Millisecond {
		t.Errorf("Pace(1.01 s, 10 hits) = %v, %v; want 15ms, false", w, stop)
	}
	if p.Rate(500*time.Millisecond) != 10 || p.Rate(1500*time.Millisecond) != 40 {
		t.Error("Rate does not step at 1 s")
	}
}

func TestStepResponse(t *testing.T) {
	slo := 100 * time.Millisecond
	at := func(ms int, lat time.Duration, shed bool) stepServed {
		return stepServed{after: time.Duration(ms) * time.Millisecond, latency: lat, shed: shed}
	}
	// Late in the first two windows, then on time with a steady share shed.
	var rs []stepServed
	for w := 0; w < 10; w++ {
		lat := 50 * time.Millisecond
		if w < 2 {
			lat = 300 * time.Millisecond
		}
		for i := 0; i < 10; i++ {
			rs = append(rs, at(w*200+i*20, lat, i < 3))
		}
	}
	rec, ok, cv := stepResponse(rs, slo, 2*time.Second)
	if rec != 400*time.Millisecond || !ok || cv != 0 {
		t.Errorf("recovery %v (recovered %v), shed CV %v; want 400ms, true, 0 (3 of 10 shed in every window)", rec, ok, cv)
	}
	// Never on time: not recovered, the whole time after the step.
	rec, ok, _ = stepResponse([]stepServed{at(100, time.Second, false), at(1900, time.Second, false)}, slo, 2*time.Second)
	if rec != 2*time.Second || ok {
		t.Errorf("recovery %v, recovered %v; want 2s, false", rec, ok)
	}
	// On time from the start, shedding unevenly: a positive CV.
	rs = nil
	for w := 0; w < 5; w++ {
		for i := 0; i < 10; i++ {
			rs = append(rs, at(w*200+i*20, 10*time.Millisecond, w%2 == 0 && i < 5))
		}
	}
	if rec, ok, cv := stepResponse(rs, slo, time.Second); rec != 0 || !ok || cv < 0.5 {
		t.Errorf("recovery %v, recovered %v, shed CV %v; want 0, true, a CV of about 0.8", rec, ok, cv)
	}
	// A window whose requests were all shed misses nothing; a shed share
	// that swings between all and none is unsteady.
	rs = nil
	for w := 0; w < 6; w++ {
		for i := 0; i < 10; i++ {
			rs = append(rs, at(w*200+i*20, 10*time.Millisecond, w%2 == 1))
		}
	}
	if rec, ok, cv := stepResponse(rs, slo, 1200*time.Millisecond); rec != 0 || !ok || cv < 0.9 {
		t.Errorf("recovery %v, recovered %v, shed CV %v; want 0, true, a CV of 1", rec, ok, cv)
	}
}

// The load generator steps its rate: fewer requests before the step than
// after it, in the same time.
func TestLoadGenSteps(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	var out bytes.Buffer
	if err := LoadGen(&out, LoadSpec{Base: srv.URL, Rate: 100, Duration: 600 * time.Millisecond, Step: StepLoad{From: 20, At: 300 * time.Millisecond}, Timeout: time.Second, MixSeed: 1}); err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(&out)
	var first time.Time
	before, after := 0, 0
	for {
		var lr LoadResult
		if err := dec.Decode(&lr); err != nil {
			break
		}
		if first.IsZero() || lr.Timestamp.Before(first) {
			first = lr.Timestamp
		}
		if lr.Seq < 6 {
			before++
		} else {
			after++
		}
	}
	// 20/s for 0.3 s: 6 hits; 100/s for 0.3 s: about 30.
	if before != 6 || after < 20 || after > 31 {
		t.Errorf("%d hits before the step and %d after; want 6 and about 30", before, after)
	}
	if err := LoadGen(&out, LoadSpec{Base: srv.URL, Rate: 100, Duration: 600 * time.Millisecond, Step: StepLoad{From: 20, At: time.Second}, MixSeed: 1}); err == nil {
		t.Error("a step after the run's end was accepted")
	}
}
