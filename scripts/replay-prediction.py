#!/usr/bin/env python3
"""The replay's prediction against the real run (issue 84 item 4).

For each condition (2 cores; the 1.5-CPU cgroup) and load level, each
pair's trace recorded under Observe is replayed by `cpuwork simulate
--trace` as cpuwork (the middleware: the objective as target), imgproxy's
semaphore (pool-q2: GOMAXPROCS workers, a queue of 2 per worker) and a
semaphore whose waiters leave at the objective (semaphore, every
request's deadline set to the objective); the real run's same variants
(cpuwork, sem, sem-deadline) in the same pair give the measured figures.
Usage: scripts/replay-prediction.py RESULTS.json TRACE_DIR CPUWORK_BINARY
(the traces of a run: CPUWORK_TRACE_DIR=DIR cpuwork bench ... --variants ...,cpuwork-observe)
"""
import json, math, os, statistics as st, subprocess, sys, tempfile

res, tdir, cw = sys.argv[1], sys.argv[2], sys.argv[3]
r = json.load(open(res))
sc = [s for s in r['scenarios'] if s['name'] == 'realserver'][0]
vs = {v['name']: v for v in sc['variants']}

def gm(x):
    return math.exp(st.mean(map(math.log, x))) if x else float('nan')

def replay(trace, slots, policies, deadline_ms=None):
    path = trace
    if deadline_ms is not None:
        fd, path = tempfile.mkstemp(suffix='.csv')
        with open(trace) as f, os.fdopen(fd, 'w') as g:
            lines = f.read().splitlines()
            head = lines[0].split(',')
            i = head.index('deadline_ms')
            g.write(lines[0] + '\n')
            for l in lines[1:]:
                c = l.split(',')
                c[i] = str(deadline_ms)
                g.write(','.join(c) + '\n')
    out = subprocess.run([cw, 'simulate', '--trace', path, '--slots', str(slots), '--queue-limit', '4',
                          '--policies', ','.join(policies), '--json'], capture_output=True, text=True, check=True).stdout
    if deadline_ms is not None:
        os.unlink(path)
    d = json.loads(out)
    got = {}
    for res in d[0]['policies']:
        c = res['classes'][0]
        got[res['policy']] = dict(goodput=c['goodput_cpu_s_per_s'], p99=c['p99_served_s'], refused=c['refused'] / max(c['requests'], 1), n=c['requests'])
    return got

def real(name, i):
    v = vs.get(name)
    if v is None or i >= len(v['repeats']):
        return None
    x = v['repeats'][i]
    e = x.get('extra', {})
    return dict(goodput=e.get('goodput_cpu_per_s'), p99=x.get('p99_s'), refused=e.get('shed_share'))

print(__doc__.strip().split('\n')[0])
print()
for cond, suf in [('2 cores', ''), ('1.5-CPU cgroup', '+quota1.5')]:
    for lvl in ['80', '200']:
        obs = f'cpuwork-observe{suf}@{lvl}%'
        if obs not in vs:
            continue
        n = len(vs[obs]['repeats'])
        rows = []
        for i in range(n):
            tname = f"realserver-{obs.replace('@', '-').replace('%', 'pct').replace('+', '-')}-pair{i+1}.csv"
            tpath = os.path.join(tdir, tname)
            if not os.path.exists(tpath):
                print('missing', tpath); continue
            p = replay(tpath, 2, ['cpuwork', 'pool-q2'])
            slo = 1020
            p.update({'sem-deadline': replay(tpath, 2, ['semaphore'], deadline_ms=slo)['semaphore']})
            m = {k: real(k + suf + '@' + lvl + '%', i) for k in ['cpuwork', 'sem', 'sem-deadline']}
            rows.append((i + 1, p, m))
        print(f'## {cond}, {lvl} % ({len(rows)} pairs)')
        for i, p, m in rows:
            peers_p = {'sem': p['pool-q2'], 'sem-deadline': p['sem-deadline']}
            best_p = max((k for k in peers_p if lvl == '200' or k == 'sem'), key=lambda k: peers_p[k]['goodput'])
            peers_m = {k: v for k, v in m.items() if k != 'cpuwork' and v and v['goodput'] is not None}
            best_m = max(peers_m, key=lambda k: peers_m[k]['goodput']) if peers_m else None
            line = f"pair {i}: requests {p['cpuwork']['n']}; predicted cpuwork goodput {p['cpuwork']['goodput']:.3f} CPU-s/s, refused {100*p['cpuwork']['refused']:.1f} %, p99 served {1000*p['cpuwork']['p99']:.0f} ms; best peer {best_p} {peers_p[best_p]['goodput']:.3f} (ratio {p['cpuwork']['goodput']/max(peers_p[best_p]['goodput'],1e-9):.3f})"
            if m['cpuwork'] and best_m:
                mc, mb = m['cpuwork'], peers_m[best_m]
                line += f" | measured cpuwork {mc['goodput']:.3f}, refused {100*(mc['refused'] or 0):.1f} %, p99 served {1000*mc['p99']:.0f} ms; best peer {best_m} {mb['goodput']:.3f} (ratio {mc['goodput']/max(mb['goodput'],1e-9):.3f})"
            print(line)
        pr = [p['cpuwork']['goodput'] / max(max(p['pool-q2']['goodput'], p['sem-deadline']['goodput'] if lvl == '200' else 0), 1e-9) for _, p, _ in rows]
        mr = []
        for _, p, m in rows:
            peers_m = [v['goodput'] for k, v in m.items() if k != 'cpuwork' and v and v['goodput']]
            if m['cpuwork'] and peers_m:
                mr.append(m['cpuwork']['goodput'] / max(peers_m))
        print(f"goodput ratio cpuwork / best peer: predicted geomean {gm(pr):.3f} (per pair {', '.join(f'{x:.3f}' for x in pr)}); measured geomean {gm(mr):.3f}, range {min(mr):.3f}-{max(mr):.3f} (per pair {', '.join(f'{x:.3f}' for x in mr)})" if mr else 'no measured pairs')
        pref = [100 * p['cpuwork']['refused'] for _, p, _ in rows]
        mref = [100 * (m['cpuwork']['refused'] or 0) for _, _, m in rows if m['cpuwork']]
        print(f"cpuwork refused: predicted mean {st.mean(pref):.1f} %, measured mean {st.mean(mref):.1f} %" if mref else '')
        print()
