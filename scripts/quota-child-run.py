#!/usr/bin/env python3
# One run of `cpuwork quota-child` in a fresh cgroup v1 CPU quota (root):
#   scripts/quota-child-run.py BIN MODE QUOTA ROUNDS ITERS [ENV=VALUE ...]
# prints the rounds' mean/p50/p99/max, the child's CPU per round, the quota
# used over the rounds and over the whole run, and throttled/total periods.
# Used for the A/B runs behind the pacer's bucket cap (docs/raw/quota-cap-2026-11-24.txt).
import subprocess, json, os, sys, time, resource, statistics
# usage: qexp.py BIN MODE QUOTA ROUNDS ITERS [ENV=..]
binp, mode, q, rounds, iters = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4], sys.argv[5]
env = dict(os.environ)
for kv in sys.argv[6:]:
    k, v = kv.split('=', 1); env[k] = v
G = '/sys/fs/cgroup/cpu/qexp-%d' % os.getpid()
os.mkdir(G)
try:
    open(G + '/cpu.cfs_quota_us', 'w').write(str(int(q * 100000)))
    st0 = dict(l.split() for l in open(G + '/cpu.stat'))
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.time()
    out = subprocess.run(['sh', '-c', 'echo $$ > "$1" && exec "$2" quota-child --mode "$3" --rounds "$4" --goroutines 10 --iters "$5"', 'sh', G + '/cgroup.procs', binp, mode, rounds, iters], env=env, capture_output=True, text=True, check=True).stdout
    wall = time.time() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    st1 = dict(l.split() for l in open(G + '/cpu.stat'))
finally:
    os.rmdir(G)
o = json.loads(out)
rs = sorted(x / 1e6 for x in o['rounds'])
used_r = o['cpu_ns'] / 1e9 / (q * sum(rs) / 1e3)
cpu = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
span = sum(rs) / 1e3
p99 = rs[min(len(rs) - 1, int(0.99 * len(rs)))]
print(f"{mode:14s} q={q} mean {statistics.mean(rs):6.2f} p50 {rs[len(rs)//2]:6.2f} p99 {p99:6.2f} max {rs[-1]:6.2f} ms; cpu/round {cpu/len(rs)*1e3:6.2f} ms; used {used_r*100:5.1f}% run {cpu/(q*wall)*100:5.1f}% (wall {wall:.2f}s); throttled {int(st1['nr_throttled'])-int(st0['nr_throttled'])}/{int(st1['nr_periods'])-int(st0['nr_periods'])}")
