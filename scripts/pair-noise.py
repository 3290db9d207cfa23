#!/usr/bin/env python3
"""Writes cmd/cpuwork/internal/bench/testdata/pair-noise.json: the noise of
paired ratios on this machine, from the checked-in bench runs.

For every check of every results JSON given (the earlier engine's runs) that compares a variant
with alternatives over 3 or more paired repeats, the per-repeat log ratios
are centred on their own mean (what remains is the run-to-run noise of a
paired ratio, the effect taken out) and scaled by sqrt(n/(n-1)) (centring
on a mean of n shrinks the spread by that much). The residuals are grouped
by scenario; TestSequentialVerdictErrorRates draws simulated pairs from
them.

Usage: scripts/pair-noise.py docs/raw/bench-{full,inference,load,priority,service}-seed*.json.xz
(the runs are kept xz-compressed; plain .json files are read as they are)
"""
import collections
import json
import lzma
import math
import statistics
import sys

res = collections.defaultdict(list)
for f in sorted(sys.argv[1:]):
    d = json.load(lzma.open(f) if f.endswith(".xz") else open(f))
    for s in d["scenarios"]:
        for c in s.get("checks") or []:
            vals = [v for v in (c.get("values") or []) if v > 0]
            if not c.get("against") or len(vals) < 3:
                continue
            logs = [math.log(v) for v in vals]
            m = statistics.mean(logs)
            k = math.sqrt(len(logs) / (len(logs) - 1))
            res[s["name"]] += [round((x - m) * k, 5) for x in logs]
json.dump({"sources": sorted(sys.argv[1:]), "residuals": res}, sys.stdout, indent=None)
print()
