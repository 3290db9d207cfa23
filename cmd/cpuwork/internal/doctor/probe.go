package doctor

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cpuwork/cpuwork/schedstat"
)

// Probes is what an outside observer can always measure of a server: the
// time it takes to answer a trivial request (GET of the --url itself; any
// status is an answer), a few times spread over the window. A saturated Go
// process answers late or not at all: its netpoller is polled by a P only
// when its run queues are empty (and by sysmon every 10 ms), and the
// handler goroutine then waits behind every runnable one.
//
// Each probe ends one way: answered (its status and headers came in time;
// a redirect is an answer, never followed), refused (nothing listens
// there), timed out (not a byte of the answer in time), slow to send
// headers (the answer began in time but its headers took at least
// slowAnswer more, and half the probe's time or longer: the process is
// not what keeps it waiting) or failed (an answer the client refused:
// malformed, headers over its bound; Why says what).
type Probes struct {
	Sent        int             `json:"sent"`
	Answered    int             `json:"answered"`
	Refused     int             `json:"refused"` // connection refused: nothing listens there
	TimedOut    int             `json:"timed_out"`
	SlowHeaders int             `json:"slow_headers"`
	Failed      int             `json:"failed"`
	Why         []string        `json:"why,omitempty"` // the failed ones' reasons, each once
	Latency     []time.Duration `json:"latency_ns"`    // of the answered ones
}

// targetClient is the doctor's HTTP client for its target. It follows no
// redirect: a redirect is the target's answer, and the doctor (often run
// as root) reads nothing of another host or scheme as the target's. An
// answer's headers are bounded at maxHeaderBytes (the bodies are bounded
// where they are read).
var targetClient = &http.Client{
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	Transport: func() http.RoundTripper {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxResponseHeaderBytes = maxHeaderBytes
		return t
	}(),
}

// maxHeaderBytes bounds the headers of an answer the doctor reads.
const maxHeaderBytes = 1 << 20

// redirectError is a source that answered with a redirect.
type redirectError struct {
	url, status, location string
}

func (e *redirectError) Error() string {
	return fmt.Sprintf("%s: %s, a redirect to %q: not followed (the doctor reads only the target itself; give --url the address that serves /debug/)", e.url, e.status, e.location)
}

// Get reads u from a target with targetClient, within ctx: the body of a
// 200 answer, which the caller bounds and closes; a redirect (not
// followed) or another status is an error naming u, the status and hint
// (what the target should serve there).
func Get(ctx context.Context, u, hint string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", u, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", u, err)
	}
	resp, err := targetClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", u, err)
	}
	if err := checkRedirect(u, resp); err != nil {
		resp.Body.Close()
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, newStatusError(u, resp, hint)
	}
	return resp.Body, nil
}

// checkRedirect returns a redirectError when resp is a redirect.
func checkRedirect(u string, resp *http.Response) error {
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		return &redirectError{url: u, status: resp.Status, location: resp.Header.Get("Location")}
	}
	return nil
}

// median of the answered probes' latencies (0 for none).
func (p *Probes) median() time.Duration {
	if len(p.Latency) == 0 {
		return 0
	}
	s := slices.Clone(p.Latency)
	slices.Sort(s)
	return s[len(s)/2]
}

// probePath is what a probe asks for below --url: a path no program
// serves (any status is an answer), under /debug/ so that cpuworkhttp's
// default bypass answers it without a slot: a probe measures whether the
// process gets to its network handlers, not its admission queue.
const probePath = "/debug/cpuwork-doctor-probe"

// probe sends n trivial requests to base's probePath, one every d/n,
// each allowed to take until the window's end plus margin, and returns
// when every probe has answered or given up.
func probe(ctx context.Context, base string, n int, d, margin time.Duration) *Probes {
	base = strings.TrimSuffix(base, "/") + probePath
	p := &Probes{}
	type result struct {
		lat, first time.Duration // until the headers, until the answer's first byte (0: none)
		err        error
		refused    bool
	}
	results := make(chan result, n)
	deadline := time.Now().Add(d + margin)
	for i := range n {
		at := time.Duration(i) * d / time.Duration(n)
		go func() {
			select {
			case <-time.After(at):
			case <-ctx.Done():
				results <- result{err: ctx.Err()}
				return
			}
			rctx, cancel := context.WithDeadline(ctx, deadline)
			defer cancel()
			var first atomic.Int64
			t0 := time.Now()
			rctx = httptrace.WithClientTrace(rctx, &httptrace.ClientTrace{
				GotFirstResponseByte: func() { first.Store(int64(time.Since(t0))) },
			})
			req, err := http.NewRequestWithContext(rctx, "GET", base, nil)
			if err != nil {
				results <- result{err: err}
				return
			}
			resp, err := targetClient.Do(req)
			r := result{lat: time.Since(t0), err: err, first: time.Duration(first.Load())}
			if err != nil {
				r.refused = isRefused(err)
			} else {
				resp.Body.Close()
			}
			results <- r
		}()
	}
	for range n {
		r := <-results
		p.Sent++
		slow := r.first > 0 && r.lat-r.first >= slowAnswer && r.lat-r.first >= r.lat/2
		switch {
		case r.refused:
			p.Refused++
		case slow && (r.err == nil || errors.Is(r.err, context.DeadlineExceeded)):
			p.SlowHeaders++
		case r.err == nil:
			p.Answered++
			p.Latency = append(p.Latency, r.lat)
		case errors.Is(r.err, context.DeadlineExceeded) || errors.Is(r.err, context.Canceled):
			p.TimedOut++
		default:
			p.Failed++
			why := r.err.Error()
			if ue, ok := r.err.(*url.Error); ok {
				why = ue.Err.Error()
			}
			if len(why) > 200 {
				why = why[:200] + "…"
			}
			if !slices.Contains(p.Why, why) {
				p.Why = append(p.Why, why)
			}
		}
	}
	return p
}

func isRefused(err error) bool {
	return strings.Contains(err.Error(), "connection refused") || strings.Contains(err.Error(), "no such host")
}

// procStat reads a process's start time (field 22, clock ticks since boot)
// and user+system CPU time (fields 14+15, in clock ticks of 10 ms: Linux's
// USER_HZ is 100 on every architecture Go supports) from /proc/PID/stat:
// process totals, which keep the time of threads that exited.
func procStat(pid int) (start int64, cpu time.Duration, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	return parseProcStat(b)
}

func parseProcStat(b []byte) (start int64, cpu time.Duration, err error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, errors.New("/proc/PID/stat: no ')'")
	}
	f := strings.Fields(string(b[i+1:])) // f[0] is field 3
	if len(f) < 20 {
		return 0, 0, fmt.Errorf("/proc/PID/stat: %d fields after the name, want >= 20", len(f))
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 63)
	st, err2 := strconv.ParseUint(f[12], 10, 63)
	start, err3 := strconv.ParseInt(f[19], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return 0, 0, fmt.Errorf("/proc/PID/stat: %w", err)
	}
	const tick = 10 * time.Millisecond
	return start, time.Duration(min(ut+st, uint64(1<<62)/uint64(tick))) * tick, nil
}

// GoInfo is what the target's binary says about its Go runtime.
type GoInfo struct {
	GoVersion string `json:"go_version"` // "" when the binary is not a Go program (or unreadable)
	// QuotaAware reports whether the runtime's default GOMAXPROCS follows
	// the cgroup quota: Go >= 1.25 with a main module at go 1.25 or later
	// (else the binary's DefaultGODEBUG carries containermaxprocs=0), and
	// no containermaxprocs=0 in the process's GODEBUG variable.
	QuotaAware bool   `json:"quota_aware"`
	Unreadable string `json:"unreadable,omitempty"`
	// NotGo: the binary was read and is not a Go program (as opposed to a
	// binary that could not be read, which may be one).
	NotGo bool `json:"not_go,omitempty"`
	// MainModule is the main module's path ("" when unknown): the
	// program's own code, as opposed to its libraries.
	MainModule string `json:"main_module,omitempty"`
	// Cpuwork: the program links github.com/cpuwork/cpuwork (its build
	// information lists the module): it runs an executor, or can.
	Cpuwork bool `json:"links_cpuwork,omitempty"`
}

// cpuworkModule is the library's module path.
const cpuworkModule = "github.com/cpuwork/cpuwork"

// goInfo reads the build information of /proc/PID/exe.
func goInfo(pid int) GoInfo {
	bi, err := buildinfo.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "exe"))
	if err != nil {
		return GoInfo{Unreadable: err.Error(), NotGo: strings.Contains(err.Error(), "not a Go executable")}
	}
	g := GoInfo{GoVersion: bi.GoVersion, QuotaAware: goAtLeast(bi.GoVersion, 25), MainModule: bi.Main.Path}
	g.Cpuwork = bi.Main.Path == cpuworkModule || slices.ContainsFunc(bi.Deps, func(m *debug.Module) bool { return m.Path == cpuworkModule })
	for _, s := range bi.Settings {
		if s.Key == "DefaultGODEBUG" && hasSetting(s.Value, "containermaxprocs=0") {
			g.QuotaAware = false
		}
	}
	// The environment overrides the binary's default (the last setting wins).
	if env, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "environ")); err == nil {
		for _, kv := range strings.Split(string(env), "\x00") {
			if v, ok := strings.CutPrefix(kv, "GODEBUG="); ok {
				for _, set := range strings.Split(v, ",") {
					switch strings.TrimSpace(set) {
					case "containermaxprocs=0":
						g.QuotaAware = false
					case "containermaxprocs=1":
						g.QuotaAware = goAtLeast(g.GoVersion, 25)
					}
				}
			}
		}
	}
	return g
}

// hasSetting reports whether a comma-separated GODEBUG list holds kv.
func hasSetting(list, kv string) bool {
	for _, s := range strings.Split(list, ",") {
		if strings.TrimSpace(s) == kv {
			return true
		}
	}
	return false
}

// goAtLeast reports whether a "go1.N[.M]" version is at least go1.minor.
func goAtLeast(v string, minor int) bool {
	rest, ok := strings.CutPrefix(v, "go1.")
	if !ok {
		return false
	}
	n := 0
	for _, c := range rest {
		if c < '0' || c > '9' {
			break
		}
		n = n*10 + int(c-'0')
	}
	return n >= minor
}

// sampleRunnable reads the target's runnable threads every d/n and
// returns their mean (kernel state R in /proc/PID/task/*/stat).
func sampleRunnable(ctx context.Context, pid, n int, d time.Duration) float64 {
	sum, k := 0, 0
	t := time.NewTicker(d / time.Duration(n))
	defer t.Stop()
	for range n {
		select {
		case <-ctx.Done():
			return mean(sum, k)
		case <-t.C:
		}
		if th, err := schedstat.ReadThreads(pid); err == nil {
			sum += th.Runnable
			k++
		}
	}
	return mean(sum, k)
}

func mean(sum, k int) float64 {
	if k == 0 {
		return 0
	}
	return float64(sum) / float64(k)
}
