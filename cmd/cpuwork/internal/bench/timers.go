package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cpuwork/cpuwork"
	"github.com/cpuwork/cpuwork/cmd/cpuwork/internal/workload"
)

var timerVariants = []struct{ name, desc string }{
	{"pool", "GOMAXPROCS worker goroutines running 1 ms CPU jobs back to back"},
	{"pool-gosched", "the same pool calling runtime.Gosched once per 1 ms job (the C1 fix)"},
	{"pool-gosched-50us", "the same pool calling runtime.Gosched at every ~50 µs step, where cpuwork's jobs call Checkpoint: at least as often as Checkpoint yields (it yields every 1 ms, and within ~100 µs when goroutines are runnable)"},
	{"cpuwork", "the same jobs as Executor Batch tasks (defaults) calling Checkpoint every ~50 µs"},
}

// timers: a 1 ms sleep-loop canary and a loopback TCP echo beside CPU
// workers that occupy every P, alone and in each competition case.
// Timers only fire when a P enters the scheduler (Go issue 38860).
func (r *Runner) timers(unit time.Duration) (*Scenario, error) {
	s := &Scenario{
		Name:     "timers",
		Baseline: "pool",
		Claim:    "busy CPU workers delay timers and the netpoller (Go issue 38860); yielding inside CPU loops fixes it (C1: runtime.Gosched every 1000 iterations)",
	}
	cases := r.competitions()
	for _, cc := range cases {
		for _, tv := range timerVariants {
			s.Variants = append(s.Variants, &Variant{Name: tv.name + cc.suffix(), Description: tv.desc + "; " + cc.Desc, Valid: true})
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("timers: listen on loopback: %w", err)
	}
	defer ln.Close()
	go echoServer(ln)
	job := workload.NewSpin(unit)
	echo := map[string]*histT{}
	r.eachCase(s, "timers", cases, nil, func(cc competition, v *Variant, warm bool) error {
		base, _ := baseName(v.Name)
		canary, eh, series, u, err := r.timersOnce(base, job, ln.Addr().String())
		if warm || err != nil {
			return err
		}
		v.addRun(canary, series, u)
		v.setRepeatExtra("echo_p99_s", latencyOf(eh).P99)
		if echo[v.Name] == nil {
			echo[v.Name] = newHist()
		}
		echo[v.Name].Merge(eh)
		return nil
	})
	for _, v := range s.Variants {
		if h := echo[v.Name]; h != nil {
			l := latencyOf(h)
			v.setExtra("echo_p50_s", l.P50)
			v.setExtra("echo_p99_s", l.P99)
			v.setExtra("echo_p999_s", l.P999)
			v.setExtra("echo_count", float64(l.Count))
		}
		v.Throughput = float64(v.Latency.Count) / max(v.WallS, 1e-9)
	}
	s.ratios()
	s.caseRatios()
	var parts []string
	holds, measured := true, false
	for _, cc := range cases {
		p, cw := s.variant("pool"+cc.suffix()), s.variant("cpuwork"+cc.suffix())
		if p == nil || cw == nil || !p.Valid || !cw.Valid {
			continue
		}
		measured = true
		judge := func(cw, p float64) bool {
			if cc.Name == "" {
				return cw <= 0.002 && p >= 0.010
			}
			return cw/p <= 0.5
		}
		want := "expected <= 0.5x"
		if cc.Name == "" {
			want = "expected <= 2 ms vs >= 10 ms"
		}
		cwP99, pP99 := median(cw.p99s()), median(p.p99s())
		ok := judge(cwP99, pP99)
		n := min(len(cw.Repeats), len(p.Repeats))
		k := agreement(n, func(i int) bool { return judge(cw.Repeats[i].P99, p.Repeats[i].P99) })
		holds = holds && ok
		part := fmt.Sprintf("%s: canary p99 %.2f ms with Checkpoint vs %.2f ms for the busy pool (%.2fx; %s)",
			map[bool]string{true: "alone", false: cc.Name}[cc.Name == ""], cwP99*1e3, pP99*1e3, cwP99/pP99, want)
		for _, other := range []string{"pool-gosched", "pool-gosched-50us"} {
			if g := s.variant(other + cc.suffix()); g != nil && g.Valid {
				part += fmt.Sprintf(", %.2f ms for %s (%.2fx)", median(g.p99s())*1e3, other, cwP99/median(g.p99s()))
			}
		}
		part += fmt.Sprintf("; echo p99 %.2f vs %.2f ms: %s in %d/%d repeats", median(cw.repeatExtras("echo_p99_s"))*1e3, median(p.repeatExtras("echo_p99_s"))*1e3, holdsWord(ok), k, n)
		parts = append(parts, part)
	}
	if measured {
		s.Holds = boolp(holds)
		s.Verdict = strings.Join(parts, "; ")
	}
	return s, nil
}

func echoServer(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() { io.Copy(c, c); c.Close() }()
	}
}

func (r *Runner) timersOnce(variant string, job *workload.Spin, addr string) (canary, echo *histT, series [][2]float64, u usage, err error) {
	P := runtime.GOMAXPROCS(0)
	var stop atomic.Bool
	var wg sync.WaitGroup
	var e *cpuwork.Executor
	if variant == "cpuwork" {
		if e, err = r.executor(64); err != nil {
			return
		}
		defer e.Close(context.Background())
	}
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, nil, nil, u, fmt.Errorf("timers: dial echo server: %w", err)
	}
	defer conn.Close()

	m := startMeter()
	t0 := time.Now()
	steps := int(job.D / (50 * time.Microsecond))
	for range P {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			for !stop.Load() {
				switch variant {
				case "pool":
					job.Run(0)
				case "pool-gosched":
					job.Run(0)
					runtime.Gosched()
				case "pool-gosched-50us":
					job.RunChecked(steps, func() error { runtime.Gosched(); return nil })
				case "cpuwork":
					e.Do(ctx, cpuwork.Batch, func(ctx context.Context) error {
						return job.RunChecked(steps, func() error { return cpuwork.Checkpoint(ctx) })
					})
				}
			}
		}()
	}
	// Canary: sleep until each 1 ms mark; lateness = wake time - mark.
	rec := newRecorder(t0, int(r.duration/time.Millisecond))
	ch := rec.shard()
	canaryDone := make(chan struct{})
	go func() {
		defer close(canaryDone)
		for k := 1; ; k++ {
			mark := t0.Add(time.Duration(k) * time.Millisecond)
			if mark.Sub(t0) > r.duration {
				return
			}
			time.Sleep(time.Until(mark))
			now := time.Now()
			rec.record(ch, now, now.Sub(mark))
		}
	}()
	// Echo: an 8-byte stamp every 2 ms, open-loop; the RTT counts from
	// the intended send time.
	echoRec := newRecorder(t0, int(r.duration/(2*time.Millisecond)))
	eh := echoRec.shard()
	sent := 0
	var got atomic.Int64
	readDone := make(chan error, 1)
	go func() {
		buf := make([]byte, 8)
		for {
			if _, err := io.ReadFull(conn, buf); err != nil {
				readDone <- err
				return
			}
			intended := t0.Add(time.Duration(int64(buf[0]) | int64(buf[1])<<8 | int64(buf[2])<<16 | int64(buf[3])<<24 |
				int64(buf[4])<<32 | int64(buf[5])<<40 | int64(buf[6])<<48 | int64(buf[7])<<56))
			now := time.Now()
			echoRec.record(eh, now, now.Sub(intended))
			got.Add(1)
		}
	}()
	for k := 1; ; k++ {
		off := time.Duration(k) * 2 * time.Millisecond
		if off > r.duration {
			break
		}
		time.Sleep(time.Until(t0.Add(off)))
		var b [8]byte
		for i := range b {
			b[i] = byte(uint64(off) >> (8 * i))
		}
		if _, err := conn.Write(b[:]); err != nil {
			break
		}
		sent++
	}
	<-canaryDone
	stop.Store(true)
	wg.Wait()
	// Wait for outstanding echoes (bounded), then stop the reader.
	deadline := time.Now().Add(2 * time.Second)
	for got.Load() < int64(sent) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	conn.Close()
	<-readDone
	u = m.stop()
	return rec.merged(), echoRec.merged(), rec.series, u, nil
}
