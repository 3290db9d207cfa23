#!/usr/bin/env python3
"""Prints README's results table from a bench run's results.json: one row
per comparison (claim and case) with its verdict, estimate, 95 % interval,
margin, pairs and the best alternative by name.

Usage: scripts/results-table.py docs/raw/<bench-default-run>.json
"""
import json
import sys

path = sys.argv[1]
d = json.load(open(path))
print(f"| scenario | comparison | verdict | cpuwork / best | 95 % interval | margin | pairs | best alternative |")
print("|---|---|---|---|---|---|---|---|")
for s in d["scenarios"]:
    if s.get("skipped"):
        print(f"| {s['name']} | | skipped: {s['skipped']} | | | | | |")
        continue
    for c in s.get("checks") or []:
        if c.get("kind") != "comparison":
            continue
        if c.get("not_judged"):
            print(f"| {s['name']} | {c['label']} | not judged: {c['not_judged']} | | | | | |")
            continue
        print(f"| {s['name']} | {c['label']} | **{c['verdict']}** | {c['estimate']:.2f}x | "
              f"{c['ci_low']:.2f}–{c['ci_high']:.2f}x | ±{100*c['margin']:.0f} % | {c['pairs']} | {c['best_alternative']} |")
print()
print(f"From `{path}` (seed {d['seed']}, {d['duration_s']/60:.1f} min on {d['machine']['cpus']} CPUs).")
