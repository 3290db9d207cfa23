#!/usr/bin/env python3
"""The replay's prediction against the real run (issue 84 item 4).

For each condition (2 cores; the 1.5-CPU cgroup) and load level, each
pair's trace recorded under Observe is replayed by `cpuwork simulate
--trace` as cpuwork (the middleware: the objective as target), imgproxy's
semaphore (pool-q2: GOMAXPROCS workers, a queue of 2 per worker) and a
semaphore whose waiters leave at the objective (semaphore, every
request's deadline set to the objective); the real run's same variants
(cpuwork, sem, sem-deadline) in the same pair give the measured figures.
Usage: [CPUS=1.5 [THROTTLE=1]] [SCENARIO=realserver] [PEERS=...] [LEVELS=80,200] scripts/replay-prediction.py RESULTS.json TRACE_DIR CPUWORK_BINARY
PEERS maps each real peer to its model in the replay, comma-separated
real=policy[:qN][:deadline] (qN: the bounded pool's queue; deadline: every
request's deadline at the objective); OVERLOAD names the peers that run
only above capacity. The defaults are imageproxy's.
(the traces of a run: CPUWORK_TRACE_DIR=DIR cpuwork bench ... --variants ...,cpuwork-observe)
"""
import json, math, os, statistics as st, subprocess, sys, tempfile

res, tdir, cw = sys.argv[1], sys.argv[2], sys.argv[3]
r = json.load(open(res))
SCENARIO = os.environ.get('SCENARIO', 'realserver')
PEERS = [p.split('=') for p in os.environ.get('PEERS', 'sem=pool-q2,sem-deadline=semaphore:deadline').split(',')]
OVERLOAD = os.environ.get('OVERLOAD', 'sem-deadline').split(',')
sc = [s for s in r['scenarios'] if s['name'] == SCENARIO][0]
vs = {v['name']: v for v in sc['variants']}

def gm(x):
    return math.exp(st.mean(map(math.log, x))) if x else float('nan')

def replay(trace, slots, policy, queue=None, deadline_ms=None, cpus=None):
    """One policy's replay of trace: goodput, p99 of served, refused share, requests."""
    path = trace
    if deadline_ms is not None:
        fd, path = tempfile.mkstemp(suffix='.csv')
        with open(trace) as f, os.fdopen(fd, 'w') as g:
            lines = f.read().splitlines()
            i = lines[0].split(',').index('deadline_ms')
            g.write(lines[0] + '\n')
            for l in lines[1:]:
                c = l.split(',')
                c[i] = str(deadline_ms)
                g.write(','.join(c) + '\n')
    args = [cw, 'simulate', '--trace', path, '--slots', str(slots), '--policies', policy, '--json']
    if queue:
        args += ['--queue-limit', str(queue)]
    if cpus:
        args += ['--cpus', str(cpus)]
        if THROTTLE:
            args += ['--throttle']
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    if deadline_ms is not None:
        os.unlink(path)
    c = json.loads(out)[0]['policies'][0]['classes'][0]
    return dict(goodput=c['goodput_cpu_s_per_s'], p99=c['p99_served_s'], refused=c['refused'] / max(c['requests'], 1), n=c['requests'], objective=c['objective_s'])

def model(trace, spec, slo_ms, cpus):
    """The replay of a peer's model: policy[:qN][:deadline]."""
    parts = spec.split(':')
    queue = next((int(x[1:]) for x in parts[1:] if x.startswith('q')), None)
    return replay(trace, 2, parts[0], queue=queue, deadline_ms=slo_ms if 'deadline' in parts[1:] else None, cpus=cpus)

def real(name, i):
    v = vs.get(name)
    if v is None or i >= len(v['repeats']):
        return None
    x = v['repeats'][i]
    e = x.get('extra', {})
    if e.get('goodput_cpu_per_s') is None:
        return None
    return dict(goodput=e.get('goodput_cpu_per_s'), p99=x.get('p99_s'), refused=e.get('shed_share') or 0)

def fmt(d):
    return f"goodput {d['goodput']:.3f} CPU-s/s, refused {100*d['refused']:.1f} %, p99 served {1000*d['p99']:.0f} ms" if d['p99'] is not None else f"goodput {d['goodput']:.3f} CPU-s/s, refused {100*d['refused']:.1f} %"

CPUS = float(os.environ.get('CPUS') or 0) or None  # CPUS=1.5: replay the cgroup's traces with --cpus 1.5
THROTTLE = os.environ.get('THROTTLE') == '1'  # with CPUS: --throttle, the quota's periods instead of stretched CPU times
print(__doc__.strip().split('\n')[0])
print(f"scenario {SCENARIO}; peers (real = replayed): {', '.join('='.join(p) for p in PEERS)}; overload-only: {', '.join(OVERLOAD)}")
print()
for cond, suf in [('2 cores', ''), ('1.5-CPU cgroup', '+quota1.5')]:
    cpus = CPUS if suf else None
    for lvl in os.environ.get('LEVELS', '80,200').split(','):
        obs = f'cpuwork-observe{suf}@{lvl}%'
        if obs not in vs:
            continue
        peers = [(k, m) for k, m in PEERS if lvl == '200' or k not in OVERLOAD]
        pr, mr, pref, mref = [], [], [], []
        print(f'## {cond}, {lvl} % ({len(vs[obs]["repeats"])} pairs)' + (f', replayed with --cpus {cpus}' + (' --throttle' if THROTTLE else '') if cpus else ''))
        for i in range(len(vs[obs]['repeats'])):
            tname = f"{SCENARIO}-{obs.replace('@', '-').replace('%', 'pct').replace('+', '-')}-pair{i+1}.csv"
            tpath = os.path.join(tdir, tname)
            if not os.path.exists(tpath):
                print('missing', tpath)
                continue
            pc = replay(tpath, 2, 'cpuwork', cpus=cpus)
            slo_ms = round(pc['objective'] * 1000)
            pp = {k: model(tpath, m, slo_ms, cpus) for k, m in peers}
            mc = real('cpuwork' + suf + '@' + lvl + '%', i)
            mp = {k: real(k + suf + '@' + lvl + '%', i) for k, _ in peers}
            mp = {k: v for k, v in mp.items() if v}
            bp = max(pp, key=lambda k: pp[k]['goodput'])
            line = f"pair {i+1}: {pc['n']} requests; predicted cpuwork {fmt(pc)}; best peer {bp} {pp[bp]['goodput']:.3f} (ratio {pc['goodput']/max(pp[bp]['goodput'],1e-9):.3f})"
            pr.append(pc['goodput'] / max(pp[bp]['goodput'], 1e-9))
            pref.append(100 * pc['refused'])
            if mc and mp:
                bm = max(mp, key=lambda k: mp[k]['goodput'])
                line += f" | measured cpuwork {fmt(mc)}; best peer {bm} {mp[bm]['goodput']:.3f} (ratio {mc['goodput']/max(mp[bm]['goodput'],1e-9):.3f})"
                mr.append(mc['goodput'] / max(mp[bm]['goodput'], 1e-9))
                mref.append(100 * mc['refused'])
            print(line)
        if mr:
            print(f"goodput ratio cpuwork / best peer: predicted geomean {gm(pr):.3f} (per pair {', '.join(f'{x:.3f}' for x in pr)}); measured geomean {gm(mr):.3f}, range {min(mr):.3f}-{max(mr):.3f} (per pair {', '.join(f'{x:.3f}' for x in mr)})")
            print(f"cpuwork refused: predicted mean {st.mean(pref):.1f} %, measured mean {st.mean(mref):.1f} %")
        print()
