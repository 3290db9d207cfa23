package bench

// The fleet scenario: three replicas of a CPU-bound gRPC service of
// unequal capacity (2:1:1: one in a 0.8-CPU cgroup, two in 0.4-CPU
// cgroups), each admitting its calls through cpuworkgrpc with its load
// reported per call, behind a grpc-go client that balances by
// round_robin or by weighted_round_robin reading those reports, under
// open-loop load at 0.8x, 1x and 1.5x the fleet's capacity; and the same
// fleet where each replica has the usual semaphore (GOMAXPROCS workers,
// waiters leaving at the objective) and reports nothing.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/cpuwork/cpuwork"
	"github.com/cpuwork/cpuwork/cgroup"
	"github.com/cpuwork/cpuwork/cmd/cpuwork/internal/workload"
	"github.com/cpuwork/cpuwork/cpuworkgrpc"
	"golang.org/x/sync/semaphore"
	"google.golang.org/grpc"
	_ "google.golang.org/grpc/balancer/weightedroundrobin" // registers weighted_round_robin
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// The fleet: each replica's CPU quota, the work per call and the
// objective, the run's phases and the load levels.
var fleetQuotas = []float64{0.8, 0.4, 0.4}

const (
	fleetCost      = 5 * time.Millisecond   // CPU per call
	fleetObjective = 500 * time.Millisecond // 100 calls' work; a 0.4-CPU replica's throttled pause is 60 ms
	fleetWarmup    = 1500 * time.Millisecond
	fleetMeasure   = 3 * time.Second
	fleetControl   = "cpuwork-rr"
	fleetMethod    = "/cpuwork.bench.Fleet/Work"
	// fleetStepAt is when, in the step run, a CPU-bound neighbour starts
	// in the large replica's cgroup (after the warm-up).
	fleetStepAt = time.Second
)

var fleetLoads = []float64{0.8, 1.0, 1.5}

// fleetAlone are the variants that measure what reporting costs: the
// large replica alone at 80 % of its capacity, with ReportLoad and
// without (and the A/A copy of the latter).
var fleetAlone = []struct{ name, desc string }{
	{"alone-report", "the large replica alone at 80 % of its capacity, cpuworkgrpc with ReportLoad"},
	{"alone-quiet", "the same without ReportLoad"},
	{"alone-quiet" + aaSuffix, aaDesc("alone-quiet")},
}

// fleetPolicy is the client's balancer for each variant: the service
// config it is given. weighted_round_robin's defaults wait 10 s before
// using a weight (blackoutPeriod) and recompute weights every second:
// here weights count from the first report and are recomputed every
// 250 ms, so that a run of seconds measures the weights, not their
// start.
var fleetPolicy = map[string]string{
	"rr":  `{"loadBalancingConfig":[{"round_robin":{}}]}`,
	"wrr": `{"loadBalancingConfig":[{"weighted_round_robin":{"blackoutPeriod":"0s","weightUpdatePeriod":"0.25s","weightExpirationPeriod":"10s"}}]}`,
}

var fleetVariants = []struct{ name, desc string }{
	{"cpuwork-wrr", "replicas admitting through cpuworkgrpc with the objective and ReportLoad; the client's balancer is grpc-go's weighted_round_robin reading the per-call ORCA reports"},
	{"cpuwork-rr", "the same replicas; the client's balancer is round_robin (the reports are sent and not read)"},
	{"sem-rr", "replicas with the usual admission: a semaphore of GOMAXPROCS workers whose waiters leave at the objective (ResourceExhausted), no report; round_robin"},
}

func fleetDef() scenarioDef {
	return scenarioDef{name: "fleet", extra: true,
		desc: fmt.Sprintf("three replicas of a CPU-bound gRPC service with capacities 2:1:1 (cgroups of %v CPUs), a grpc-go client at %s the fleet's capacity, open loop: weighted_round_robin on cpuwork's ORCA reports against round_robin and against replicas with semaphores; and the weights' step when a neighbour starts beside the large replica (needs root; not in the default set: `cpuwork bench --scenario fleet`)",
			fleetQuotas, levelsText(fleetLoads)),
		variants: func() []string {
			vs := describe(fleetVariants)
			vs = append(vs, fleetControl+aaSuffix+": "+aaDesc(fleetControl), "cpuwork-wrr-step: cpuwork-wrr at 80 %, with a CPU-bound neighbour started in the large replica's cgroup after the warm-up")
			return append(vs, describe(fleetAlone)...)
		},
		steps: func(r *Runner, vs []string) int {
			return (len(fleetLoads)*(len(fleetVariants)+1) + 1 + len(fleetAlone)) * r.rounds
		},
		run:         needsBinary("fleet", func(r *Runner, bin []string) (*Scenario, error) { return r.fleet(bin[0]) }),
		minDuration: 500 * time.Millisecond,
		budget:      600 * time.Second}
}

// fleet runs every variant at every load, alternated in each pair, and
// the step run once per pair.
func (r *Runner) fleet(self string) (*Scenario, error) {
	s := &Scenario{Name: "fleet", Baseline: fleetControl,
		Claim: "replicas of unequal capacity that report cpuwork's load (ORCA) to a client balancing by weighted_round_robin serve more within the objective than round_robin: at the fleet's capacity, at least 1.15x (2:1:1 capacities with perfect shedding under round_robin serve 0.83 of it), and more than replicas with semaphores"}
	if cgroup.Version() == 0 || os.Geteuid() != 0 {
		s.Skipped = "needs root and a cgroup CPU controller for the replicas' quotas"
		return s, nil
	}
	spin := workload.NewSpin(fleetCost)
	var groups []*cgroup.Group
	defer func() {
		for _, g := range groups {
			removeGroup(g)
		}
	}()
	for i, q := range fleetQuotas {
		g, err := newGroup(fmt.Sprintf("bench-fleet%d", i), cgroup.Config{CPUs: q})
		if err != nil {
			s.Skipped = "cannot create the replicas' cgroups: " + err.Error()
			return s, nil
		}
		groups = append(groups, g)
	}
	var total float64
	for _, q := range fleetQuotas {
		total += q
	}
	capacity := total / fleetCost.Seconds()
	for _, l := range fleetLoads {
		for _, v := range fleetVariants {
			s.Variants = append(s.Variants, &Variant{Name: fmt.Sprintf("%s@%.0f%%", v.name, l*100), Description: v.desc, Valid: true})
		}
		s.Variants = append(s.Variants, &Variant{Name: fmt.Sprintf("%s%s@%.0f%%", fleetControl, aaSuffix, l*100), Description: aaDesc(fleetControl), Valid: true})
	}
	s.Variants = append(s.Variants, &Variant{Name: "cpuwork-wrr-step@80%", Description: "cpuwork-wrr at 80 %, a CPU-bound neighbour started in the large replica's cgroup after the warm-up", Valid: true})
	for _, v := range fleetAlone {
		s.Variants = append(s.Variants, &Variant{Name: v.name + "@80%", Description: v.desc, Valid: true})
	}
	// --variants runs a subset (the checks of the others say "not judged").
	s.Variants = slices.DeleteFunc(s.Variants, func(v *Variant) bool {
		name, _, _ := strings.Cut(v.Name, "@")
		return !r.wants(name)
	})
	r.pairs(s, fleetChecks, func(round int) {
		for _, v := range r.shuffled(s.Variants) {
			r.step(fmt.Sprintf("fleet: %s (pair %d)", v.Name, round+1))
			name, at, _ := strings.Cut(v.Name, "@")
			pct, _ := strconv.ParseFloat(strings.TrimSuffix(at, "%"), 64)
			name = strings.TrimSuffix(name, aaSuffix)
			step := strings.HasSuffix(name, "-step")
			replica, policy, _ := strings.Cut(strings.TrimSuffix(name, "-step"), "-")
			gs, rate := groups, capacity*pct/100
			if replica == "alone" { // the large replica alone, reports on or off
				gs, rate = groups[:1], fleetQuotas[0]/fleetCost.Seconds()*pct/100
				replica, policy = map[string]string{"report": "cpuwork", "quiet": "cpuwork-quiet"}[policy], "rr"
			}
			res, err := fleetOnce(self, gs, spin.Iters, replica, policy, rate, step)
			if err != nil {
				v.Valid, v.Invalid = false, err.Error()
				continue
			}
			v.addRun(res.served, nil, usage{wall: fleetMeasure.Seconds(), cpu: res.cpu})
			v.setRepeatExtra("goodput_per_s", res.goodput)
			v.setRepeatExtra("refused_share", res.refused)
			v.setRepeatExtra("unanswered_share", res.unanswered)
			v.setRepeatExtra("not_served_share", res.refused+res.unanswered)
			v.setRepeatExtra("large_share", res.largeShare)
			v.setRepeatExtra("offered_per_s", res.offered)
			if step {
				v.setRepeatExtra("step_s", res.stepS)
			}
		}
	})
	s.Notes = append(s.Notes, fmt.Sprintf("replicas in cgroups of %v CPUs, each call %s of CPU (a calibrated spin), objective %s (the client's deadline); capacity %.0f calls/s in all (%.1f CPUs / %s); each run: fresh replicas and client, %s of load before %s measured; goodput = calls answered OK within the objective per second",
		fleetQuotas, fleetCost, fleetObjective, capacity, total, fleetCost, fleetWarmup, fleetMeasure))
	judgeChecks(s, fleetChecks())
	return s, nil
}

// fleetChecks: weighted_round_robin on cpuwork's reports against
// round_robin over the same replicas and against the semaphore fleet, on
// goodput within the objective and p99 of served, at each load; the
// refused shares and the large replica's share beside them; the step.
func fleetChecks() []check {
	var cs []check
	for _, l := range fleetLoads {
		at := fmt.Sprintf("@%.0f%%", l*100)
		aa := [2]string{fleetControl + at, fleetControl + aaSuffix + at}
		lvl := fmt.Sprintf("%.0f%%", l*100)
		cs = append(cs,
			check{label: lvl + ": goodput within the objective, calls/s, against round_robin", judged: "cpuwork-wrr" + at, against: []string{"cpuwork-rr" + at}, metric: "goodput_per_s", higher: true, aa: aa, limit: 1.15},
			check{label: lvl + ": goodput within the objective, calls/s, against the semaphore fleet", judged: "cpuwork-wrr" + at, against: []string{"sem-rr" + at}, metric: "goodput_per_s", higher: true, aa: aa},
			check{label: lvl + ": p99 of served, against round_robin", judged: "cpuwork-wrr" + at, against: []string{"cpuwork-rr" + at}, metric: "p99", aa: aa},
			check{label: lvl + ": calls not served (refused, or past the client's deadline), weighted_round_robin", judged: "cpuwork-wrr" + at, metric: "not_served_share", unit: "%"},
			check{label: lvl + ": calls not served, round_robin", judged: "cpuwork-rr" + at, metric: "not_served_share", unit: "%"},
			check{label: lvl + ": calls not served, semaphores", judged: "sem-rr" + at, metric: "not_served_share", unit: "%"},
			check{label: lvl + ": the large replica's share of the calls, weighted_round_robin (its share of the capacity: 0.5)", judged: "cpuwork-wrr" + at, metric: "large_share", unit: "%"})
	}
	aa := [2]string{"alone-quiet@80%", "alone-quiet" + aaSuffix + "@80%"}
	cs = append(cs,
		check{label: "alone at 80%: p99 of served, reports on against off", judged: "alone-report@80%", against: []string{"alone-quiet@80%"}, metric: "p99", aa: aa},
		check{label: "alone at 80%: goodput within the objective, reports on against off", judged: "alone-report@80%", against: []string{"alone-quiet@80%"}, metric: "goodput_per_s", higher: true, aa: aa})
	return append(cs, check{label: "step: time until the large replica's share falls halfway to a third after a neighbour starts in its cgroup", judged: "cpuwork-wrr-step@80%", metric: "step_s", limit: 2, unit: "s"})
}

// fleetResult is one run's measurements.
type fleetResult struct {
	served              *hdrhistogram.Histogram // latency of the calls answered OK
	goodput, offered    float64                 // calls/s
	refused, unanswered float64                 // shares of the calls sent
	largeShare          float64                 // share of the calls sent to replica 0
	stepS               float64                 // step runs: seconds until the share fell
	cpu                 float64                 // CPU-s the replicas used over the run
	window              [][2]int                // calls to replica 0 and in all, per 250 ms of arrivals
}

// fleetOnce starts a fleet of replica ("cpuwork" or "sem") in groups,
// drives it at rate calls/s through a client balancing by policy ("rr",
// "wrr") and measures it; with step, a CPU-bound neighbour starts in
// the first replica's group fleetStepAt after the warm-up.
func fleetOnce(self string, groups []*cgroup.Group, iters int, replica, policy string, rate float64, step bool) (*fleetResult, error) {
	before := groupsCPU(groups)
	servers, conn, stop, err := startFleet(self, groups, iters, replica, policy)
	if err != nil {
		return nil, err
	}
	defer stop()
	total := fleetWarmup + fleetMeasure
	if step {
		total = fleetWarmup + fleetStepAt + 3*time.Second
		defer startNeighbour(self, groups[0], total)()
	}
	res, err := driveFleet(conn, servers[0].addr, rate, total)
	if err != nil {
		return nil, err
	}
	if step {
		res.stepS = stepTime(res.window, int((fleetWarmup+fleetStepAt)/fleetWindow), fleetWindow)
	}
	res.cpu = groupsCPU(groups) - before
	return res, nil
}

// groupsCPU is the CPU the groups have used, s (those whose cpu.stat
// cannot be read count none).
func groupsCPU(groups []*cgroup.Group) float64 {
	var cpu float64
	for _, g := range groups {
		if st, err := g.Stat(); err == nil {
			cpu += st.Usage.Seconds()
		}
	}
	return cpu
}

// startFleet starts a replica in each group and a gRPC client balancing
// over them by policy; stop closes the client and stops the replicas.
func startFleet(self string, groups []*cgroup.Group, iters int, replica, policy string) (servers []*realServer, conn *grpc.ClientConn, stop func(), err error) {
	stop = func() {
		if conn != nil {
			conn.Close()
		}
		for _, sv := range servers {
			sv.stop()
		}
	}
	for _, g := range groups {
		sv, err := startFleetReplica(self, g, replica, iters)
		if err != nil {
			stop()
			return nil, nil, nil, err
		}
		servers = append(servers, sv)
	}
	rs := manual.NewBuilderWithScheme("fleet")
	var addrs []resolver.Address
	for _, sv := range servers {
		addrs = append(addrs, resolver.Address{Addr: sv.addr})
	}
	rs.InitialState(resolver.State{Addresses: addrs})
	conn, err = grpc.NewClient("fleet:///replicas", grpc.WithResolvers(rs), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(fleetPolicy[policy]))
	if err != nil {
		stop()
		return nil, nil, nil, err
	}
	conn.Connect()
	return servers, conn, stop, nil
}

// startNeighbour starts a CPU-bound neighbour in g fleetStepAt after the
// warm-up, to run to the run's end (total); the returned func kills it
// there, so that it never runs into the next run's replicas.
func startNeighbour(self string, g *cgroup.Group, total time.Duration) func() {
	hogged := make(chan *exec.Cmd, 1)
	timer := time.AfterFunc(fleetWarmup+fleetStepAt, func() {
		unpin := pinForChildren()
		defer unpin()
		hog, done, err := inGroup(self, g, "hog", "--threads", "1", "--duration", (total - fleetWarmup - fleetStepAt + time.Second).String())
		if err != nil {
			hogged <- nil
			return
		}
		err = hog.Start()
		done()
		if err != nil {
			hog = nil
		}
		hogged <- hog
	})
	return func() {
		if !timer.Stop() {
			if hog := <-hogged; hog != nil {
				hog.Process.Kill()
				hog.Wait()
			}
		}
	}
}

// fleetWindow is the share of calls to replica 0's window of arrivals.
const fleetWindow = 250 * time.Millisecond

// driveFleet sends calls through conn open-loop, Poisson at rate calls/s,
// for total, and measures those that arrived after the warm-up (large:
// replica 0's address, whose share of the calls it counts per window).
func driveFleet(conn *grpc.ClientConn, large string, rate float64, total time.Duration) (*fleetResult, error) {
	measureFrom := fleetWarmup
	res := &fleetResult{served: newHist()}
	var mu sync.Mutex
	res.window = make([][2]int, int(total/fleetWindow)+1)
	var wg sync.WaitGroup
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	start := time.Now()
	var good, refused, unanswered, toLarge, sent int
	for at := time.Duration(0); at < total; at += time.Duration(rng.ExpFloat64() / rate * float64(time.Second)) {
		if d := time.Until(start.Add(at)); d > 0 {
			time.Sleep(d)
		}
		wg.Add(1)
		go func(at time.Duration) {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), fleetObjective)
			defer cancel()
			var p peer.Peer
			err := conn.Invoke(ctx, fleetMethod, &emptypb.Empty{}, &emptypb.Empty{}, grpc.Peer(&p))
			lat := time.Since(start.Add(at))
			mu.Lock()
			defer mu.Unlock()
			isLarge := p.Addr != nil && p.Addr.String() == large
			w := int(at / fleetWindow)
			res.window[w][1]++
			if isLarge {
				res.window[w][0]++
			}
			if at < measureFrom {
				return
			}
			sent++
			if isLarge {
				toLarge++
			}
			switch {
			case err == nil && lat <= fleetObjective:
				good++
				res.served.RecordValue(lat.Microseconds())
			case err == nil:
				res.served.RecordValue(lat.Microseconds())
			case grpcstatus.Code(err) == codes.ResourceExhausted:
				refused++
			default:
				unanswered++
			}
		}(at)
	}
	wg.Wait()
	if sent == 0 {
		return nil, fmt.Errorf("no call sent in the measured window")
	}
	d := (total - measureFrom).Seconds()
	res.goodput, res.offered = float64(good)/d, float64(sent)/d
	res.refused, res.unanswered = float64(refused)/float64(sent), float64(unanswered)/float64(sent)
	res.largeShare = float64(toLarge) / float64(sent)
	return res, nil
}

// stepTime is how long after window at the share of calls to replica 0
// (w[i][0] / w[i][1]) first falls halfway from its mean before at (over
// the last second) to a third: two consecutive windows under it, read
// to the end of the first. NaN when it never does.
func stepTime(w [][2]int, at int, win time.Duration) float64 {
	var a, n int
	for i := max(at-4, 0); i < at; i++ {
		a, n = a+w[i][0], n+w[i][1]
	}
	if n == 0 {
		return math.NaN()
	}
	before := float64(a) / float64(n)
	mid := (before + 1.0/3) / 2
	share := func(i int) float64 {
		if w[i][1] == 0 {
			return math.NaN()
		}
		return float64(w[i][0]) / float64(w[i][1])
	}
	for i := at; i+1 < len(w); i++ {
		if share(i) < mid && share(i+1) < mid {
			return (time.Duration(i-at+1) * win).Seconds()
		}
	}
	return math.NaN()
}

// startFleetReplica starts the hidden fleet-replica stage in g and waits
// for its address.
func startFleetReplica(self string, g *cgroup.Group, replica string, iters int) (*realServer, error) {
	unpin := pinForChildren()
	cmd, done, err := inGroup(self, g, "fleet-replica", "--variant", replica, "--iters", strconv.Itoa(iters), "--objective", fleetObjective.String())
	if err != nil {
		unpin()
		return nil, err
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		done()
		unpin()
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		done()
		unpin()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		done()
		unpin()
		return nil, err
	}
	sv := &realServer{cmd: cmd, stdin: stdin, out: bufio.NewReader(out), done: func() { done(); unpin() }}
	line, err := sv.out.ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if err != nil || !ok {
		sv.stop()
		return nil, fmt.Errorf("fleet replica did not start: %q %v", line, err)
	}
	sv.addr = addr
	return sv, nil
}

// FleetReplica is the fleet scenario's replica (the hidden
// fleet-replica stage): a gRPC server on a loopback port whose one
// method spins iters iterations, admitted by variant ("cpuwork":
// cpuworkgrpc with the objective and ReportLoad; "sem": a semaphore of
// GOMAXPROCS whose waiters leave at their deadline). It writes
// "listening ADDR" to out and serves until in reaches EOF.
func FleetReplica(variant string, iters int, objective time.Duration, in io.Reader, out io.Writer) error {
	spin := &workload.Spin{Iters: iters}
	var opts []grpc.ServerOption
	switch variant {
	case "cpuwork", "cpuwork-quiet":
		e, err := cpuwork.New(cpuwork.Options{})
		if err != nil {
			return err
		}
		defer e.Close(context.Background())
		o := cpuworkgrpc.Options{Objective: objective, ReportLoad: variant == "cpuwork"}
		opts = append(opts, grpc.UnaryInterceptor(cpuworkgrpc.UnaryServerInterceptor(e, o)))
	case "sem":
		sem := semaphore.NewWeighted(int64(runtime.GOMAXPROCS(0)))
		opts = append(opts, grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if err := sem.Acquire(ctx, 1); err != nil {
				return nil, grpcstatus.Error(codes.ResourceExhausted, "no worker free before the deadline")
			}
			defer sem.Release(1)
			return h(ctx, req)
		}))
	default:
		return fmt.Errorf("fleet-replica: variant %q (want cpuwork, cpuwork-quiet or sem)", variant)
	}
	srv := grpc.NewServer(opts...)
	srv.RegisterService(&grpc.ServiceDesc{ServiceName: "cpuwork.bench.Fleet", HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Work", Handler: func(_ any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			in := new(emptypb.Empty)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, _ any) (any, error) {
				spin.Run(0)
				return &emptypb.Empty{}, nil
			}
			if ic == nil {
				return h(ctx, in)
			}
			return ic(ctx, in, &grpc.UnaryServerInfo{FullMethod: fleetMethod}, h)
		}}}}, struct{}{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go srv.Serve(ln)
	fmt.Fprintf(out, "listening %s\n", ln.Addr())
	io.Copy(io.Discard, in)
	srv.Stop()
	return nil
}
