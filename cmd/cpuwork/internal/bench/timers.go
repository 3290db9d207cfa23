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
	{"pool-gosched-50us", "the same pool calling runtime.Gosched at every ~50 µs step, where cpuwork's jobs call Checkpoint: about as often as Checkpoint yields while every P is busy (every 40 µs on average by default, and within ~100 µs when goroutines are runnable)"},
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
		s.Variants = append(s.Variants, &Variant{Name: timersAA + aaSuffix + cc.suffix(), Description: aaDesc(timersAA) + "; " + cc.Desc, Valid: true})
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("timers: listen on loopback: %w", err)
	}
	defer ln.Close()
	go echoServer(ln)
	job := workload.NewSpin(unit)
	echo := map[string]*histT{}
	r.eachCase(s, "timers", cases, func() []check { return timerChecks(cases) }, nil, nil, func(cc competition, v *Variant, warm bool) error {
		base, _ := baseName(v.Name)
		canary, eh, series, u, jobs, err := r.timersOnce(strings.TrimSuffix(base, aaSuffix), job, ln.Addr().String())
		if warm || err != nil {
			return err
		}
		v.addRun(canary, series, u)
		v.setRepeatExtra("echo_p99_s", latencyOf(eh).P99)
		v.setRepeatExtra("batch_jobs_per_s", jobs)
		v.setExtra("batch_jobs_per_s", runMean(v.Extra["batch_jobs_per_s"], jobs, len(v.Repeats)))
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
	judgeChecks(s, timerChecks(cases))
	return s, nil
}

// timerChecks: in every case, cpuwork (Batch tasks calling Checkpoint, the
// docs' way) against the best of the busy pool, a Gosched per job and a
// Gosched every ~50 µs on the canary's p99, and its batch throughput
// against the pool that Goscheds every ~50 µs.
func timerChecks(cases []competition) []check {
	var cs []check
	for _, cc := range cases {
		where, suf := cc.Name, cc.suffix()
		if where == "" {
			where = "alone"
		}
		aa := [2]string{timersAA + suf, timersAA + aaSuffix + suf}
		cs = append(cs,
			check{label: where + ": timer canary p99", judged: "cpuwork" + suf, against: []string{"pool" + suf, "pool-gosched" + suf, "pool-gosched-50us" + suf}, metric: "p99", aa: aa},
			check{label: where + ": batch jobs/s vs yielding as often", judged: "cpuwork" + suf, against: []string{"pool-gosched-50us" + suf}, metric: "batch_jobs_per_s", higher: true, aa: aa})
	}
	return cs
}

// timersAA is the timers scenario's A/A control: the pool yielding as
// often as cpuwork's Checkpoint, the like-for-like alternative.
const timersAA = "pool-gosched-50us"

func echoServer(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() { io.Copy(c, c); c.Close() }()
	}
}

// timersOnce runs one variant for the run's duration and returns the
// canary's and the echo's latencies and the batch jobs done per second. A
// run whose canary woke for fewer than 95 % of its marks or whose echoes
// did not all come back is an error: the measurement was not made.
func (r *Runner) timersOnce(variant string, job *workload.Spin, addr string) (canary, echo *histT, series [][2]float64, u usage, jobsPerS float64, err error) {
	P := runtime.GOMAXPROCS(0)
	var stop atomic.Bool
	var wg sync.WaitGroup
	var e *cpuwork.Executor
	if variant == "cpuwork" {
		if e, err = r.executor(64); err != nil {
			return nil, nil, nil, u, 0, err
		}
		defer e.Close(context.Background())
	}
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, nil, nil, u, 0, fmt.Errorf("timers: dial echo server: %w", err)
	}
	defer conn.Close()

	m := startMeter()
	t0 := time.Now()
	var jobs atomic.Int64
	timersBatch(variant, P, job, e, &stop, &wg, &jobs)
	// Canary: sleep until each 1 ms mark; lateness = wake time - mark.
	rec := newRecorder(t0, int(r.duration/time.Millisecond))
	canaryDone := timersCanary(rec, t0, r.duration)
	// Echo: an 8-byte stamp every 2 ms, open-loop; the RTT counts from
	// the intended send time.
	echoRec := newRecorder(t0, int(r.duration/(2*time.Millisecond)))
	got, readDone := readEchoes(conn, echoRec, t0)
	sent := sendEchoes(conn, t0, r.duration)
	<-canaryDone
	stop.Store(true)
	wg.Wait()
	jobsPerS = float64(jobs.Load()) / time.Since(t0).Seconds()
	// Wait for outstanding echoes (bounded), then stop the reader.
	deadline := time.Now().Add(2 * time.Second)
	for got.Load() < int64(sent) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	conn.Close()
	<-readDone
	u = m.stop()
	c := rec.merged()
	if err := canaryValid(c.TotalCount(), r.duration); err != nil {
		return nil, nil, nil, u, 0, err
	}
	if err := echoValid(got.Load(), int64(sent)); err != nil {
		return nil, nil, nil, u, 0, err
	}
	return c, echoRec.merged(), rec.series, u, jobsPerS, nil
}

// timersBatch starts a batch loop on each of the P Ps running job the
// variant's way (through e for cpuwork), counting jobs, until stop.
func timersBatch(variant string, P int, job *workload.Spin, e *cpuwork.Executor, stop *atomic.Bool, wg *sync.WaitGroup, jobs *atomic.Int64) {
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
				jobs.Add(1)
			}
		}()
	}
}

// timersCanary records into rec how late a goroutine sleeping to each
// 1 ms mark from t0 wakes, for d; the channel closes when it is done.
func timersCanary(rec *recorder, t0 time.Time, d time.Duration) <-chan struct{} {
	ch := rec.shard()
	canaryDone := make(chan struct{})
	go func() {
		defer close(canaryDone)
		for k := 1; ; k++ {
			mark := t0.Add(time.Duration(k) * time.Millisecond)
			if mark.Sub(t0) > d {
				return
			}
			time.Sleep(time.Until(mark))
			now := time.Now()
			rec.record(ch, now, now.Sub(mark))
		}
	}()
	return canaryDone
}

// readEchoes records into rec each echo's round trip from its intended
// send time (its 8-byte stamp, an offset from t0) and counts them in got;
// readDone gets the read error that ends it.
func readEchoes(conn net.Conn, rec *recorder, t0 time.Time) (got *atomic.Int64, readDone <-chan error) {
	eh := rec.shard()
	got = new(atomic.Int64)
	done := make(chan error, 1)
	go func() {
		buf := make([]byte, 8)
		for {
			if _, err := io.ReadFull(conn, buf); err != nil {
				done <- err
				return
			}
			intended := t0.Add(time.Duration(int64(buf[0]) | int64(buf[1])<<8 | int64(buf[2])<<16 | int64(buf[3])<<24 |
				int64(buf[4])<<32 | int64(buf[5])<<40 | int64(buf[6])<<48 | int64(buf[7])<<56))
			now := time.Now()
			rec.record(eh, now, now.Sub(intended))
			got.Add(1)
		}
	}()
	return got, done
}

// sendEchoes sends an 8-byte stamp (its offset from t0) every 2 ms,
// open-loop, for d, and returns how many it sent.
func sendEchoes(conn net.Conn, t0 time.Time, d time.Duration) int {
	sent := 0
	for k := 1; ; k++ {
		off := time.Duration(k) * 2 * time.Millisecond
		if off > d {
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
	return sent
}
