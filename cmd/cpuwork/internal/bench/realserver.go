package bench

// The realserver scenarios: a third-party Go server as it ships
// (willnorris.com/go/imageproxy; Open Policy Agent's REST server), built
// from the Go module proxy by the realbench module, which keeps it and
// the overload-control libraries out of the CLI's dependency graph; stock
// and behind the admitters a Go team would pick, each in a process of its
// own, unconstrained and in a 1.5-CPU cgroup, loaded open-loop with its
// own CPU-heavy requests.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cpuwork/cpuwork/budget"
	"github.com/cpuwork/cpuwork/cgroup"
	"github.com/cpuwork/cpuwork/schedstat"
)

// realserverPeers are the admitters cpuwork is judged against, as the
// realbench commands build them (realbench/admit).
var realserverPeers = []struct{ name, desc string }{
	{"stock", "the server as it ships: every request runs at once"},
	{"sem", "imgproxy's admitter: an x/sync semaphore of GOMAXPROCS workers and a queue of 2x that, 503 when full"},
	{"sem2x", "the same with 2x GOMAXPROCS workers and a queue of 4x (imgproxy's default worker count)"},
	{"failsafe", "failsafe-go v0.9.8 adaptivelimiter with its queue (x2 to x3 the limit, waiting at most the objective), through failsafehttp"},
	{"gradient2", "go-concurrency-limits v0.8.0 Gradient2 behind its FIFO blocking limiter (backlog 8x GOMAXPROCS, waiting at most the objective)"},
	{"sem-deadline", "a semaphore whose waiters leave at the objective (in overload only): an x/sync semaphore of GOMAXPROCS workers, a request with no worker by its arrival plus the objective answers 503"},
}

// realserverVariants are the peers and cpuwork.
var realserverVariants = append(slices.Clone(realserverPeers),
	struct{ name, desc string }{"cpuwork", "the cpuworkhttp middleware with the objective, served through WatchListener (7 added lines: realbench/admit)"})

// vipsPeers are the admitters of the cgo image server (realbench/vips):
// the one such servers ship, with and without its queue, and failsafe-go.
var vipsPeers = []struct{ name, desc string }{
	{"stock", "the server with every request run at once"},
	{"shipped", "the admitter cgo image servers such as imaginary ship: an x/sync semaphore of 2x GOMAXPROCS workers, no queue, 503 when all are busy"},
	{"shipped-queue", "the same with a queue of 8, 503 when full"},
	{"failsafe", "failsafe-go v0.9.8 adaptivelimiter with its queue (x2 to x3 the limit, waiting at most the objective), through failsafehttp"},
	{"sem-deadline", "a semaphore whose waiters leave at the objective (in overload only): an x/sync semaphore of GOMAXPROCS workers, a request with no worker by its arrival plus the objective answers 503"},
}

// vipsControl is the cgo image server's A/A control: its own admitter.
const vipsControl = "shipped-queue"

// zstdPeers are the admitters of the cgo compression server
// (realbench/zstd): its own (a semaphore with a queue), imgproxy's
// semaphore with a queue of 2 per slot, a semaphore whose waiters leave
// at the objective, and failsafe-go.
var zstdPeers = []struct{ name, desc string }{
	{"stock", "the server with every request run at once"},
	{"shipped-queue", "the server's own admitter: an x/sync semaphore of 2x GOMAXPROCS workers and a queue of 8, 503 when full"},
	{"sem", "imgproxy's admitter, a bounded pool answering 503: an x/sync semaphore of GOMAXPROCS workers and a queue of 2 per worker, 503 when full"},
	{"failsafe", "failsafe-go v0.9.8 adaptivelimiter with its queue (x2 to x3 the limit, waiting at most the objective), through failsafehttp"},
	{"sem-deadline", "a semaphore whose waiters leave at the objective (in overload only): an x/sync semaphore of GOMAXPROCS workers, a request with no worker by its arrival plus the objective answers 503"},
}

// realserverNames lists the realserver scenarios' variants (--list).
func realserverNames() []string { return imageproxyTarget.names() }

// realserverLoads are the default load levels (fractions of the stock
// server's capacity); --thorough runs thoroughLoads.
var realserverLoads = []float64{0.8, 2}

// realserverQuota is the CPU quota of the quota case, in cores.
const realserverQuota = 1.5

// realserverControl is the A/A control: the simplest bounded admitter.
const realserverControl = "sem"

// findRealbench returns the realbench module's directory: $CPUWORK_REALBENCH,
// or realbench/ in the working directory or one of its parents.
func findRealbench() (string, error) {
	if d := os.Getenv("CPUWORK_REALBENCH"); d != "" {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err != nil {
			return "", fmt.Errorf("CPUWORK_REALBENCH=%s: %w", d, err)
		}
		return d, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "realbench", "go.mod")); err == nil {
			return filepath.Join(d, "realbench"), nil
		}
		if filepath.Dir(d) == d {
			return "", errors.New("no realbench module in the working directory or its parents (run from the repository, or set CPUWORK_REALBENCH)")
		}
	}
}

// realTarget is a third-party server the realbench module builds.
type realTarget struct {
	scenario, cmd string // the scenario's name; the realbench command (a directory of the module)
	desc, claim   string // for --list; the scenario's claim
	small, large  string // what each request kind does, for the notes
	origin        bool   // the server fetches from the bench's origin of JPEGs
	// needs names what the build needs beyond the Go module proxy, for
	// the reason a scenario is skipped ("" nothing).
	needs string
	// peers are the admitters cpuwork is judged against and control the
	// A/A control among them; nil and "": realserverPeers and
	// realserverControl.
	peers   []struct{ name, desc string }
	control string
	// args are the command's extra flags; procs says what GOMAXPROCS it
	// runs with in the quota case, for the notes.
	args  []string
	procs string
	// cpuworkDesc, when set, describes the cpuwork variant.
	cpuworkDesc string
}

func (tg realTarget) peerList() []struct{ name, desc string } {
	if tg.peers != nil {
		return tg.peers
	}
	return realserverPeers
}

func (tg realTarget) controlName() string {
	if tg.control != "" {
		return tg.control
	}
	return realserverControl
}

// variants are tg's peers, cpuwork, and cpuwork-observe (run only when
// named: namedOnly).
func (tg realTarget) variants() []struct{ name, desc string } {
	cw := realserverVariants[len(realserverVariants)-1]
	if tg.cpuworkDesc != "" {
		cw.desc = tg.cpuworkDesc
	}
	return append(slices.Clone(tg.peerList()), cw, realObserve)
}

// realObserve records the server's traffic for a replay: cpuwork's lines
// under Observe (every request at once), the trace written at the run's
// end into $CPUWORK_TRACE_DIR when it is set.
var realObserve = struct{ name, desc string }{"cpuwork-observe", "cpuwork's lines with Options.Record's Observe: every request runs at once and is recorded; with CPUWORK_TRACE_DIR set, each run's trace is written there for cpuwork simulate --trace (run only when named)"}

// names lists tg's variants and its A/A control (--list).
func (tg realTarget) names() []string {
	return append(describe(tg.variants()), tg.controlName()+aaSuffix+": "+aaDesc(tg.controlName()))
}

// quotaProcs is what GOMAXPROCS tg runs with in the quota case.
func (tg realTarget) quotaProcs() string {
	if tg.procs != "" {
		return tg.procs
	}
	return "GOMAXPROCS from Go's default for it: 2"
}

var (
	imageproxyTarget = realTarget{scenario: "realserver", cmd: "imageproxy", origin: true,
		desc:  "a third-party image server (willnorris.com/go/imageproxy, built by the realbench module from the Go module proxy) under open-loop load at 80% and 2x its capacity, unconstrained and in a 1.5-CPU cgroup: stock, imgproxy's semaphore, failsafe-go's adaptive limiter, go-concurrency-limits' Gradient2, cpuwork's middleware",
		claim: "a third-party image server (imageproxy) with cpuwork's middleware added in 7 lines against the admitters a Go team would pick (imgproxy's semaphore and queue, failsafe-go's adaptive limiter, go-concurrency-limits' Gradient2): p99 below capacity and goodput within the objective in overload, unconstrained and in a 1.5-CPU cgroup",
		small: "a 200x150 thumbnail of an 800x600 JPEG", large: "a 600x400 smart crop of a 3000x2000 JPEG"}
	opaTarget = realTarget{scenario: "realserver-opa", cmd: "opa",
		desc:  "Open Policy Agent's REST server (github.com/open-policy-agent/opa, built by the realbench module from the Go module proxy) over an in-memory store, as realserver",
		claim: "Open Policy Agent's REST server with cpuwork's middleware added in 7 lines against the admitters a Go team would pick: p99 below capacity and goodput within the objective in overload, unconstrained and in a 1.5-CPU cgroup",
		small: "a policy query over 500 resources (a comprehension)", large: "a policy query over 20,000 resources (glob.match and a join with their groups)"}
	vipsTarget = realTarget{scenario: "realserver-vips", cmd: "vips", origin: true, peers: vipsPeers, control: vipsControl,
		needs: "libvips and pkg-config (Debian: apt-get install libvips-dev)",
		desc:  "a cgo image server (libvips through h2non/bimg, Debian's libvips, built by the realbench module) whose work runs outside the Go scheduler's Ps, with GOMAXPROCS from Go's default, under open-loop load at 80% and 2x its capacity, unconstrained and in a 1.5-CPU cgroup: stock, the semaphore such servers ship (2x GOMAXPROCS workers, with and without a queue of 8), failsafe-go's adaptive limiter, cpuwork's middleware",
		claim: "a cgo image server (libvips) with cpuwork's middleware added in 7 lines against the admitter such servers ship and failsafe-go: never worse, unconstrained and in a 1.5-CPU cgroup",
		small: "a 300 px wide JPEG of an 800x600 one (libvips)", large: "a 1024 px wide JPEG of a 3000x2000 one (libvips)"}
	zstdTarget = realTarget{scenario: "realserver-zstd", cmd: "zstd", origin: true, peers: zstdPeers, control: vipsControl,
		needs: "a C compiler for cgo (gcc)",
		desc:  "a cgo compression server (the zstd C library through DataDog/zstd, built by the realbench module) that fetches its source from an origin and compresses it in one C call, with GOMAXPROCS from Go's default, under open-loop load at 80% and 2x its capacity, unconstrained and in a 1.5-CPU cgroup: stock, its own admitter (2x GOMAXPROCS workers, a queue of 8), imgproxy's semaphore, a semaphore whose waiters leave at the objective, failsafe-go's adaptive limiter, cpuwork's middleware",
		claim: "a second cgo server (zstd compression) with cpuwork's middleware added in 7 lines against its own admitter, a bounded pool answering 503, a semaphore whose waiters leave at the objective and failsafe-go: never worse, unconstrained and in a 1.5-CPU cgroup",
		small: "zstd level 19 of an 800x600 JPEG fetched from the origin, as hex", large: "zstd level 12 of a 3000x2000 JPEG fetched from the origin, as hex"}
	zstdFloorTarget = realTarget{scenario: "realserver-zstd-floor", cmd: "zstd", origin: true, peers: zstdPeers, control: vipsControl,
		needs: zstdTarget.needs,
		args:  []string{"-procs", "automaxprocs"}, procs: "GOMAXPROCS from automaxprocs: the quota rounded down, 1",
		desc:  "the cgo compression server of realserver-zstd with GOMAXPROCS set by go.uber.org/automaxprocs (the quota rounded down: 1 in the 1.5-CPU cgroup)",
		claim: zstdTarget.claim + ", with GOMAXPROCS below the quota",
		small: zstdTarget.small, large: zstdTarget.large}
	vipsFloorTarget = realTarget{scenario: "realserver-vips-floor", cmd: "vips", origin: true, peers: vipsPeers, control: vipsControl,
		needs: vipsTarget.needs,
		args:  []string{"-procs", "automaxprocs"}, procs: "GOMAXPROCS from automaxprocs: the quota rounded down, 1",
		desc:  "the cgo image server of realserver-vips with GOMAXPROCS set by go.uber.org/automaxprocs (the quota rounded down: 1 in the 1.5-CPU cgroup)",
		claim: vipsTarget.claim + ", with GOMAXPROCS below the quota",
		small: vipsTarget.small, large: vipsTarget.large}
)

// realserverDef is tg's scenario, not in the default set.
func realserverDef(tg realTarget) scenarioDef {
	return scenarioDef{name: tg.scenario, extra: true,
		desc:     fmt.Sprintf("%s (not in the default set: `cpuwork bench --scenario %s`)", tg.desc, tg.scenario),
		variants: tg.names,
		steps:    func(r *Runner, vs []string) int { return 2*loadSteps(r, vs, realserverLoads) + 1 },
		run:      func(r *Runner) (*Scenario, error) { return r.realserver(tg) },
		// The generator's pacing and start-up, as the other load scenarios.
		minDuration: 500 * time.Millisecond,
		budget:      360 * time.Second}
}

// buildRealbench builds the realbench module's command cmd into dir, from
// the Go module proxy, outside any workspace.
func buildRealbench(mod, dir, cmdName string) (string, error) {
	bin := filepath.Join(dir, cmdName)
	cmd := exec.Command("go", "build", "-o", bin, "./"+cmdName)
	cmd.Dir = mod
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build realbench/%s: %v: %s", cmdName, err, bytes.TrimSpace(out))
	}
	return bin, nil
}

// photo is a deterministic w x h JPEG with a photograph's texture (smooth
// gradients and noise), quality 85.
func photo(w, h int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, 1))
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			fx, fy := float64(x)/float64(w), float64(y)/float64(h)
			v := 128 + 60*math.Sin(fx*17+fy*5) + 40*math.Cos(fy*23-fx*3)
			img.SetRGBA(x, y, color.RGBA{uint8(v) + uint8(rng.IntN(24)), uint8(255 * fx), uint8(255*fy) + uint8(rng.IntN(16)), 255})
		}
	}
	var b bytes.Buffer
	jpeg.Encode(&b, img, &jpeg.Options{Quality: 85})
	return b.Bytes()
}

// origin serves small.jpg (800x600) and large.jpg (3000x2000) on a
// loopback port: the remote the image server fetches from.
func startOrigin() (url string, stop func(), err error) {
	small, large := photo(800, 600, 1), photo(3000, 2000, 2)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/jpeg")
		switch r.URL.Path {
		case "/small.jpg":
			w.Write(small)
		case "/large.jpg":
			w.Write(large)
		default:
			http.NotFound(w, r)
		}
	}), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	return "http://" + ln.Addr().String(), func() { srv.Close() }, nil
}

// realServer is one running server process.
type realServer struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	out     *bufio.Reader
	addr    string
	done    func()
	stopped bool
	// abandoned is the requests of each kind the server finished after
	// their client had gone, as it reported at its end (stop).
	abandoned map[string]float64
	// pacing is the cpuwork variant's Stats.Pacing as it reported it
	// (paced, target, closed_s, lowered, held, occupancy).
	pacing map[string]float64
	// demotion is the cpuwork variant's Stats.Demotion as it reported it
	// at its end (its demoted batch threads' starvation guard), if any.
	demotion map[string]float64
	// split is the cpuwork variant's latency split per class as it
	// reported it at its end: queue wait and slot time (ms), refusals.
	split map[string]map[string]float64
	// exitErr is how the server ended, when not as asked (stop): a crash
	// or an exit of its own; killed, that stop killed it.
	exitErr error
	killed  atomic.Bool
}

// startReal starts bin's variant, in g when g is not nil, and waits for
// its address.
func startReal(self, bin string, g *cgroup.Group, variant, origin string, slo time.Duration, extra ...string) (*realServer, error) {
	args := append([]string{"-variant", variant, "-origin", origin, "-slo", slo.String()}, extra...)
	var cmd *exec.Cmd
	done := func() {}
	if g != nil {
		unpin := pinForChildren()
		c, d, err := inGroupRun(self, g, bin, args...)
		if err != nil {
			unpin()
			return nil, err
		}
		cmd, done = c, func() { d(); unpin() }
	} else {
		cmd = exec.Command(bin, args...)
	}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		done()
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		done()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		done()
		return nil, fmt.Errorf("start %s: %w", variant, err)
	}
	s := &realServer{cmd: cmd, stdin: stdin, out: bufio.NewReader(out), done: done}
	line, err := s.out.ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if err != nil || !ok {
		s.stop()
		return nil, fmt.Errorf("%s did not start: %q %v", variant, line, err)
	}
	s.addr = addr
	return s, nil
}

// stop ends the server (EOF on its stdin), reads what it reports at its
// end (abandoned) and reaps it. A second call does nothing.
func (s *realServer) stop() {
	if s.stopped {
		return
	}
	s.stopped = true
	s.stdin.Close()
	timer := time.AfterFunc(10*time.Second, func() { s.killed.Store(true); s.cmd.Process.Kill() })
	for {
		line, err := s.out.ReadString('\n')
		s.report(line)
		if err != nil {
			break
		}
	}
	if err := s.cmd.Wait(); err != nil && !s.killed.Load() {
		s.exitErr = err
	}
	timer.Stop()
	s.done()
}

// died is an error when the server ended otherwise than at its stdin's
// EOF (a crash, an exit of its own): a run it served only in part.
// Called after stop.
func (s *realServer) died() error {
	if s.exitErr == nil {
		return nil
	}
	return fmt.Errorf("the server died during or at the end of a run (%v)", s.exitErr)
}

// report records one line of what the server reports at its end: the
// requests it finished after their client had gone, the cpuwork
// variant's pacer, its demoted threads' guard and its latency split per
// class ("split class=Interactive wait_p50_ms=1.2 ..."). Other lines are
// ignored.
func (s *realServer) report(line string) {
	line = strings.TrimSpace(line)
	if rest, ok := strings.CutPrefix(line, "abandoned "); ok {
		s.abandoned = keyValues(rest)
	}
	if rest, ok := strings.CutPrefix(line, "pacing "); ok {
		s.pacing = keyValues(rest)
	}
	if rest, ok := strings.CutPrefix(line, "demotion "); ok {
		s.demotion = keyValues(rest)
	}
	if rest, ok := strings.CutPrefix(line, "split class="); ok {
		class, kv, _ := strings.Cut(rest, " ")
		if s.split == nil {
			s.split = map[string]map[string]float64{}
		}
		s.split[strings.ToLower(class)] = keyValues(kv)
	}
}

// keyValues parses "k=1 k2=0.5" (a field that is not a number is left
// out).
func keyValues(s string) map[string]float64 {
	m := map[string]float64{}
	for _, f := range strings.Fields(s) {
		k, n, _ := strings.Cut(f, "=")
		if x, err := strconv.ParseFloat(n, 64); err == nil {
			m[k] = x
		}
	}
	return m
}

// requestCosts measures each request kind's CPU on the stock server,
// alone: the server's threads' on-CPU time over n serial requests of the
// kind, after one to warm up. It is the kind's weight in the goodput.
func requestCosts(bin, origin string, n int, extra ...string) (map[string]float64, error) {
	s, err := startReal("", bin, nil, "stock", origin, time.Minute, extra...)
	if err != nil {
		return nil, err
	}
	defer s.stop()
	costs := map[string]float64{}
	for _, kind := range []string{"small", "large"} {
		get := func() error {
			resp, err := http.Get("http://" + s.addr + "/" + kind)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			io.Copy(io.Discard, resp.Body)
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s: status %d", kind, resp.StatusCode)
			}
			return nil
		}
		// The first request warms up; the next one's CPU sizes the count.
		cost := func(n int) (float64, error) {
			t0, err := schedstat.ReadThreads(s.cmd.Process.Pid)
			if err != nil {
				return 0, err
			}
			for range n {
				if err := get(); err != nil {
					return 0, err
				}
			}
			t1, err := schedstat.ReadThreads(s.cmd.Process.Pid)
			if err != nil {
				return 0, err
			}
			return t1.Sub(t0).OnCPU.Seconds() / float64(n), nil
		}
		if err := get(); err != nil {
			return nil, err
		}
		one, err := cost(1)
		if err != nil {
			return nil, err
		}
		if costs[kind], err = cost(costCount(one, n)); err != nil {
			return nil, err
		}
	}
	return costs, nil
}

// costWork, costMax: requestCosts measures a kind over at least
// costWork of the server's CPU (one request's CPU tells how many), at
// most costMax requests: over a few requests of a millisecond, whether a
// garbage collection falls among them moved the measured cost, and the
// objective derived from it, 4x between runs (OPA's 1.7-ms query:
// objectives of 10 to 40 ms).
const (
	costWork = 0.3 // seconds
	costMax  = 400
)

// costCount is how many requests of one's CPU (seconds) requestCosts
// measures: enough for costWork, at least least, at most costMax.
func costCount(one float64, least int) int {
	if one <= 0 {
		return least // nothing measured to size it by
	}
	return min(costMax, max(least, int(math.Ceil(costWork/one))))
}

// realRig is what the real-server scenarios set up before their runs:
// the built server, the origin it fetches from, each request kind's CPU
// and the objective (three times a large request's CPU).
type realRig struct {
	bin, origin string
	args        []string // the command's extra flags (realTarget.args)
	costs       map[string]float64
	slo         time.Duration
	perReq      float64 // the mix's CPU per request
}

// setUpReal builds tg's server from the Go module proxy, starts the
// origin and measures the requests, and sets r's work (objective and
// costs) and the load generator's cgroup; undo tears it all down. A nil
// rig with a nil error means s is skipped (s.Skipped says why).
func (r *Runner) setUpReal(s *Scenario, tg realTarget) (rig *realRig, undo func(), err error) {
	var undos []func()
	undo = func() {
		for i := len(undos) - 1; i >= 0; i-- {
			undos[i]()
		}
	}
	fail := func(err error) (*realRig, func(), error) { undo(); return nil, func() {}, err }
	if len(r.cfg.LoadGen) == 0 {
		s.Skipped = "no load generator command configured"
		return fail(nil)
	}
	mod, err := findRealbench()
	if err != nil {
		s.Skipped = err.Error()
		return fail(nil)
	}
	dir, err := os.MkdirTemp("", "cpuwork-realserver-")
	if err != nil {
		return fail(err)
	}
	undos = append(undos, func() { os.RemoveAll(dir) })
	r.step(fmt.Sprintf("%s: building realbench/%s (Go module proxy)", s.Name, tg.cmd))
	rig = &realRig{origin: "none", args: tg.args}
	if rig.bin, err = buildRealbench(mod, dir, tg.cmd); err != nil {
		s.Skipped = err.Error()
		if tg.needs != "" {
			s.Skipped = fmt.Sprintf("it needs %s: %v", tg.needs, err)
		}
		return fail(nil)
	}
	if tg.origin {
		url, stopOrigin, err := startOrigin()
		if err != nil {
			return fail(err)
		}
		undos = append(undos, stopOrigin)
		rig.origin = url
	}
	if rig.costs, err = requestCosts(rig.bin, rig.origin, 5, rig.args...); err != nil {
		return fail(fmt.Errorf("%s: measure request costs: %w", s.Name, err))
	}
	rig.slo = time.Duration(3 * rig.costs["large"] * float64(time.Second)).Round(10 * time.Millisecond)
	rig.perReq = smallShare*rig.costs["small"] + (1-smallShare)*rig.costs["large"]
	r.work = loadWork{slo: rig.slo, cost: rig.costs}
	undos = append(undos, func() { r.work = loadWork{} }, r.loadgenIn(s, 100, "the same for every variant"))
	return rig, undo, nil
}

// inQuotaCase runs the scenario's quota case when this machine can: it
// makes the 1.5-CPU cgroup, hands it to use (which stores it where the
// scenario's run function finds it) and calls run with the variants
// renamed for the case; the cgroup is removed after. A case that cannot
// run is a note of s.
func (r *Runner) inQuotaCase(s *Scenario, variants []struct{ name, desc string }, use func(*cgroup.Group), run func(qv []struct{ name, desc string })) {
	switch {
	case os.Geteuid() != 0:
		s.Notes = append(s.Notes, fmt.Sprintf("%.1f-CPU quota case not measured: creating a cgroup needs root", realserverQuota))
		return
	case float64(runtime.NumCPU()) <= realserverQuota:
		s.Notes = append(s.Notes, fmt.Sprintf("%.1f-CPU quota case not measured: the machine has %d CPUs", realserverQuota, runtime.NumCPU()))
		return
	}
	group, err := newGroup("bench-"+s.Name, cgroup.Config{CPUs: realserverQuota})
	if err != nil {
		s.Notes = append(s.Notes, fmt.Sprintf("%.1f-CPU quota case not measured: %v", realserverQuota, err))
		return
	}
	defer removeGroup(group)
	use(group)
	var qv []struct{ name, desc string }
	for _, v := range variants {
		qv = append(qv, struct{ name, desc string }{v.name + quotaSuffix(), v.desc + fmt.Sprintf(", in a %.1f-CPU cgroup", realserverQuota)})
	}
	run(qv)
}

// realVariantOnce runs one variant of rig's server, in group when the
// variant's name carries the quota case's suffix.
func (r *Runner) realVariantOnce(s *Scenario, rig *realRig, group **cgroup.Group) func(v *Variant, variant string, rate float64) error {
	return func(v *Variant, variant string, rate float64) error {
		g := (*cgroup.Group)(nil)
		if base, ok := strings.CutSuffix(variant, quotaSuffix()); ok {
			variant, g = base, *group
		}
		r.died = ""
		err := r.realOnce(v, s.Name, rig.bin, g, variant, rig.origin, rig.slo, rate, rig.args...)
		if r.died != "" {
			s.Notes = append(s.Notes, fmt.Sprintf("%s (%s, at %.0f/s): counted as it came", r.died, v.Name, rate))
		}
		return err
	}
}

func (r *Runner) realserver(tg realTarget) (*Scenario, error) {
	s := &Scenario{Name: tg.scenario, Baseline: "stock", Claim: tg.claim}
	rig, undo, err := r.setUpReal(s, tg)
	defer undo()
	if rig == nil {
		return s, err
	}
	slo, costs := rig.slo, rig.costs
	loads := r.loadLevels(realserverLoads)
	var group *cgroup.Group
	once := r.realVariantOnce(s, rig, &group)
	variants, control := tg.variants(), tg.controlName()
	checks := func() []check { return realserverChecks(tg, loads, "", slo.Seconds()) }
	estimate := float64(r.slots) / rig.perReq
	r.search = true
	defer func() { r.search = false }()
	r.afterShare = besideShare(r, variants, loads)
	defer func() { r.afterShare = 0 }()
	cals := r.atLoads(s, variants, loads, control, checks,
		func(round int) calibration { return r.measureCapacity(s, "stock", round, estimate, once) }, once)
	s.Notes = append(s.Notes, fmt.Sprintf("small = %s (%s of the server's CPU, measured alone), large = %s (%s), 90/10 mix; objective %s (3x a large request's CPU); %s",
		tg.small, ms(costs["small"]), tg.large, ms(costs["large"]), ms(slo.Seconds()), capacityNote("stock", r.slots, cals)))
	r.checkLoads(s, "stock", loads, cals)
	s.CapacityDrift = capacityDrift(cals)
	cc, beside := r.besideCase(loads)
	if beside {
		// The team's rule: every latency claim alone and beside another
		// CPU-bound process (a nice-0 busy loop in the bench's cgroup,
		// where the server runs too). The semaphore calibrates it: beside
		// the busy loop the stock server kept up with none of the
		// descent's rates (seed 2428), its backlog growing without bound.
		r.besideAt(s, variants, control, cc, estimate, once)
	}
	r.inQuotaCase(s, variants, func(g *cgroup.Group) { group = g }, func(qv []struct{ name, desc string }) {
		qchecks := func() []check { return realserverChecks(tg, loads, quotaSuffix(), slo.Seconds()) }
		qcals := r.atLoads(s, qv, loads, control+quotaSuffix(), qchecks,
			func(round int) calibration {
				return r.measureCapacity(s, "stock"+quotaSuffix(), round, estimate*realserverQuota/float64(r.slots), once)
			}, once)
		s.Notes = append(s.Notes, fmt.Sprintf("quota case: every server in a %.1f-CPU cgroup (%s); %s", realserverQuota, tg.quotaProcs(), capacityNote("stock"+quotaSuffix(), r.slots, qcals)))
		r.checkLoads(s, "stock"+quotaSuffix(), loads, qcals)
	})
	for _, v := range s.Variants {
		base, at, _ := strings.Cut(v.Name, "@")
		suf := ""
		if strings.Contains(base, quotaSuffix()) {
			suf = quotaSuffix()
		}
		if b := s.variant("stock" + suf + "@" + at); b != nil && b.Latency.P99 > 0 {
			v.Ratio = ratiosTo(v, b)
		}
	}
	cs := append(realserverChecks(tg, loads, "", slo.Seconds()), realserverChecks(tg, loads, quotaSuffix(), slo.Seconds())...)
	if beside {
		cs = append(cs, realserverBesideChecks(tg, cc)...)
	}
	judgeChecks(s, cs)
	return s, nil
}

// realPeersAt names the peers of a real-server case (suf: "", the quota
// case's or the competitor's suffix) at level l, the alternatives of its
// comparisons, and its A/A control: the semaphore and its second run.
func realPeersAt(tg realTarget, suf string, l float64) (alts []string, aa [2]string) {
	at := fmt.Sprintf("%s@%.0f%%", suf, l*100)
	for _, p := range tg.peerList() {
		if l > 1 || !overloadOnly[p.name] { // atLoads runs those above capacity only
			alts = append(alts, p.name+at)
		}
	}
	c := tg.controlName()
	return alts, [2]string{c + at, c + suf + aaSuffix + fmt.Sprintf("@%.0f%%", l*100)}
}

// realserverBesideChecks: at besideLevel beside the competitor cc,
// cpuwork against the best peer on the p99 of all requests, with the
// share unanswered beside it.
func realserverBesideChecks(tg realTarget, cc competition) []check {
	at := fmt.Sprintf("%s@%.0f%%", cc.suffix(), besideLevel*100)
	alts, aa := realPeersAt(tg, cc.suffix(), besideLevel)
	lvl := fmt.Sprintf("%.0f%% beside %s", besideLevel*100, cc.Name)
	return []check{
		{label: lvl + ": p99 of all requests (a shed one counted as never answered)", judged: "cpuwork" + at, against: alts, metric: "p99_all_s", aa: aa},
		{label: lvl + ": unanswered (shed or failed)", judged: "cpuwork" + at, metric: "unanswered_share", limit: 0.01, unit: "%"},
	}
}

// quotaSuffix names the quota case's variants ("cpuwork+quota1.5@80%").
func quotaSuffix() string { return fmt.Sprintf("+quota%.1f", realserverQuota) }

// traceOut is the file the observe variant's server writes its trace to
// for pair (from 1) of variant name in scenario: in dir, which it
// creates when missing (an error when it cannot), so that a run never
// loses its traces to a directory nobody made.
func traceOut(dir, scenario, name string, pair int) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("CPUWORK_TRACE_DIR: %w", err)
	}
	file := strings.NewReplacer("@", "-", "%", "pct", "+", "-").Replace(fmt.Sprintf("%s-%s-pair%d.csv", scenario, name, pair))
	return filepath.Join(dir, file), nil
}

// realOnce runs one load level against variant's server, started for it
// (in g when not nil): the CPU it reports is the server's, and in g the
// share of CFS periods throttled.
func (r *Runner) realOnce(v *Variant, scenario, bin string, g *cgroup.Group, variant, origin string, slo time.Duration, rate float64, extra ...string) error {
	if dir := os.Getenv("CPUWORK_TRACE_DIR"); dir != "" && variant == realObserve.name {
		path, err := traceOut(dir, scenario, v.Name, len(v.Repeats)+1)
		if err != nil {
			return err
		}
		os.Setenv("CPUWORK_TRACE_OUT", path)
		defer os.Unsetenv("CPUWORK_TRACE_OUT")
	}
	srv, err := startReal(r.cfg.LoadGen[0], bin, g, variant, origin, slo, extra...)
	if err != nil {
		return err
	}
	defer srv.stop()
	if r.onServer != nil {
		r.onServer(srv.addr)
	}
	var before budget.Stat
	if g != nil {
		if before, err = g.Stat(); err != nil {
			return err
		}
	}
	t0, terr := schedstat.ReadThreads(srv.cmd.Process.Pid)
	start := time.Now()
	if err := r.loadAt(v, scenario, srv.addr, rate, r.cfg.LoadGen, closedLoop(rate, r.slots)...); err != nil {
		return err
	}
	// The run's window ends here, before the server is stopped: its
	// shutdown (waiting for handlers still running) is not the run's.
	t1, t1err := schedstat.ReadThreads(srv.cmd.Process.Pid)
	wall := time.Since(start)
	var after budget.Stat
	var aerr error
	if g != nil {
		after, aerr = g.Stat()
	}
	srv.stop() // its report of abandoned requests comes at its end
	if err := srv.died(); err != nil {
		// Said, not hidden: libvips has crashed a server (SIGSEGV in
		// bimg's vipsSave) during or at the end of a run; the answers
		// until then are counted as they came (realVariantOnce notes it).
		v.setRepeatExtra("server_died", 1)
		r.died = fmt.Sprintf("%s: %v", variant, err)
	}
	if len(v.Repeats) > 0 {
		r.recordServerReport(v, srv, wall)
	}
	if terr == nil && t1err == nil && len(v.Repeats) > 0 {
		server := t1.Sub(t0).OnCPU.Seconds()
		rp := &v.Repeats[len(v.Repeats)-1]
		v.CPU += server - rp.CPUS
		rp.CPUS = server
		// Over the whole run: the generator's pacing and the answers
		// still in flight at its end.
		cores := server / wall.Seconds()
		v.setRepeatExtra("server_cores", cores)
		v.setRepeatExtra("cpu_share_of_slots", cores/float64(r.slots)) // the server's, not the bench's
	}
	if g == nil {
		return nil
	}
	if aerr != nil {
		return aerr
	}
	periods := after.Periods - before.Periods
	if err := periodsValid(periods, g.Path()); err != nil {
		return err
	}
	v.setRepeatExtra("throttled_share", float64(after.ThrottledPeriods-before.ThrottledPeriods)/float64(periods))
	v.setRepeatExtra("quota_used", v.Repeats[len(v.Repeats)-1].Extra["server_cores"]/realserverQuota)
	return nil
}

// recordServerReport records in v's last repeat what the server reported
// at its end, over a run of wall: the CPU it spent on requests whose
// client had gone, its fractional slot's pacer, its starvation guard,
// and where its requests' time went inside the executor.
func (r *Runner) recordServerReport(v *Variant, srv *realServer, wall time.Duration) {
	if srv.abandoned != nil {
		// The CPU the server spent on requests it finished after their
		// client had gone (each at its kind's cost), per second of the
		// run, as a share of the slots' CPU.
		var cpu float64
		for k, n := range srv.abandoned {
			cpu += n * r.work.cost[k]
		}
		v.setRepeatExtra("abandoned_cpu_s", cpu)
		v.setRepeatExtra("abandoned_cpu_share", cpu/wall.Seconds()/float64(r.slots))
	}
	if p := srv.pacing; p["paced"] == 1 {
		// The fractional slot's pacer over the server's life (started
		// just before the run): its target at the end, the share of the
		// run its extra slot was closed, the throttled periods that
		// lowered the target and those that left it, and the slots held
		// while a request queued at the end (the door's divisor).
		v.setRepeatExtra("pacer_target", p["target"])
		v.setRepeatExtra("extra_slot_closed_share", p["closed_s"]/wall.Seconds())
		v.setRepeatExtra("throttles_lowering_target", p["lowered"])
		v.setRepeatExtra("throttles_holding_target", p["held"])
		v.setRepeatExtra("pacer_occupancy", p["occupancy"])
	}
	if d := srv.demotion; d != nil {
		// The starvation guard over the server's life: the times it
		// suspended demotion and the time its demoted threads were
		// runnable but starved.
		v.setRepeatExtra("demotion_suspensions", d["suspensions"])
		v.setRepeatExtra("demoted_starved_s", d["starved_s"])
	}
	for class, kv := range srv.split {
		// Where a request's time went inside the executor: its wait for
		// a slot and its time on one (medians and p99s, ms).
		for _, k := range []string{"wait_p50_ms", "wait_p99_ms", "slot_p50_ms", "slot_p99_ms"} {
			v.setRepeatExtra(class+"_"+k, kv[k])
		}
	}
}

// realserverChecks: cpuwork against the best peer of its case (suf: ""
// unconstrained, quotaSuffix() in the quota cgroup) on the p99 of all
// requests below capacity, and in overload on the p99 of served requests
// and the work served within the objective; with the figures a user
// reads beside them (unanswered share, served late, quota used), and the
// capacity at the objective.
func realserverChecks(tg realTarget, loads []float64, suf string, target float64) []check {
	where := ""
	if suf != "" {
		where = fmt.Sprintf("%.1f-CPU cgroup, ", realserverQuota)
	}
	var cs []check
	for _, l := range loads {
		at := fmt.Sprintf("%s@%.0f%%", suf, l*100)
		alts, aa := realPeersAt(tg, suf, l)
		lvl := fmt.Sprintf("%s%.0f%%", where, l*100)
		if l <= 1 {
			cs = append(cs,
				check{label: lvl + ": p99 of all requests (a shed one counted as never answered)", judged: "cpuwork" + at, against: alts, metric: "p99_all_s", aa: aa},
				check{label: lvl + ": unanswered (shed or failed)", judged: "cpuwork" + at, metric: "unanswered_share", limit: 0.01, unit: "%"})
			continue
		}
		cs = append(cs,
			check{label: lvl + ": goodput within the objective, CPU-s of work per s", judged: "cpuwork" + at, against: alts, metric: "goodput_cpu_per_s", higher: true, aa: aa},
			check{label: lvl + ": p99 of served", judged: "cpuwork" + at, against: alts, metric: "p99", aa: aa},
			check{label: lvl + ": served after the objective", judged: "cpuwork" + at, metric: "served_late_share", limit: 0.01, unit: "%"})
		if suf != "" {
			cs = append(cs, check{label: lvl + ": share of the quota used", judged: "cpuwork" + at, metric: "quota_used", higher: true, limit: 0.95, unit: "%"})
		}
	}
	if slices.Contains(loads, searchSteps[0]) {
		var peers []string
		for _, p := range tg.peerList() {
			if !overloadOnly[p.name] { // not run at the search's 80 %
				peers = append(peers, p.name)
			}
		}
		cs = append(cs, capacityCheck(where, suf, target, peers, tg.controlName()))
	}
	return cs
}
