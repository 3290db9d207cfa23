#!/usr/bin/env python3
"""Compares two runs of the policy matrix (`cpuwork simulate --matrix
--json`) cell by cell, for cpuwork's two modes: how many cells each
run has under 0.98x the best peer's goodput by the cell's question
(the nine honest tenants' goodput in a tenants cell), and every cell
whose goodput by that question moved below 0.98x or above 1.02x of the
first run's, the worse ones listed in full, worst first. A replay is
exact, so a cell that moved moved because the code did.

Usage: scripts/matrix-compare.py BEFORE.json[.xz] AFTER.json[.xz]
"""
import json
import lzma
import sys

if len(sys.argv) != 3:
    sys.exit(__doc__)


def load(path):
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt") as f:
        d = json.load(f)
    cells = d if isinstance(d, list) else d["cells"]
    return {(c["slots"], c["shape"], c["load"], c["mix"], c["objective"]): c for c in cells}


def goodput(cell, policy):
    r = cell["results"][policy]
    if cell["mix"] == "tenants" and "others_goodput" in r:
        return r["others_goodput"]
    return r["goodput"]


def name(k):
    return "slots=%d shape=%s load=%s mix=%s objective=%gx" % k


before, after = load(sys.argv[1]), load(sys.argv[2])
if before.keys() != after.keys():
    sys.exit("the two runs are not of the same matrix")
print("# scripts/matrix-compare.py %s %s" % (sys.argv[1], sys.argv[2]))
print("%d cells in both runs; a cell moved when its goodput within the objective is under 0.98x or over 1.02x the first run's" % len(before))
for mode in ("cpuwork", "cpuwork-target"):
    under = [0, 0]
    worse, better = [], 0
    for k in sorted(before):
        b, a = before[k], after[k]
        for i, c in enumerate((b, a)):
            if goodput(c, mode) < 0.98 * goodput(c, c["best_peer"]):
                under[i] += 1
        gb, ga = goodput(b, mode), goodput(a, mode)
        if ga < 0.98 * gb:
            worse.append((ga / gb if gb else 0.0, k, gb, ga))
        elif ga > 1.02 * gb:
            better += 1
    print()
    print("%s: under 0.98x the best peer in %d cells before, %d after; against the first run %d cells better, %d worse, %d within 2 %%"
          % (mode, under[0], under[1], better, len(worse), len(before) - better - len(worse)))
    for r, k, gb, ga in sorted(worse):
        print("  %.3fx  %-62s %.3f -> %.3f CPU-s/s" % (r, name(k), gb, ga))
