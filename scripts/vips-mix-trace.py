# Writes a request trace for `cpuwork simulate --trace`: the cgo image
# server's mix as its 1.5-CPU cgroup serves it (90 % small requests of
# 15 ms on a slot, 10 % large of 90 ms, each +-15 %), Poisson arrivals at
# LOAD times what 2 slots serve, for DURATION ms (default 2000, a bench
# run). Run: python3 scripts/vips-mix-trace.py LOAD SEED [DURATION] > t.csv
import random, sys
load, seed = float(sys.argv[1]), int(sys.argv[2])
dur = float(sys.argv[3]) if len(sys.argv) > 3 else 2000
random.seed(seed)
small, large = 15.0, 90.0
rate = load * 2 / (0.9 * small + 0.1 * large)  # per ms
t = 0.0
print("arrival_ms,class,cpu_ms")
while True:
    t += random.expovariate(rate)
    if t > dur:
        break
    c = large if random.random() < 0.1 else small
    print(f"{t:.3f},interactive,{c * random.uniform(0.85, 1.15):.3f}")
