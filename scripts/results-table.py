#!/usr/bin/env python3
"""Prints README's results table from a default bench run's results.json:
one row per scenario with its answer, each decided comparison with its
estimate and interval, and what the undecided ones would take. With
--comparisons, one row per comparison instead (verdict, estimate, 95 %
interval, margin, pairs, best alternative).

Usage: scripts/results-table.py [--comparisons] docs/raw/<bench-default-run>.json[.xz]
"""
import json
import lzma
import sys

args = [a for a in sys.argv[1:] if not a.startswith("--")]
per_comparison = "--comparisons" in sys.argv[1:]
if len(args) != 1:
    sys.exit(__doc__)
path = args[0]
opener = lzma.open if path.endswith(".xz") else open
with opener(path, "rt") as f:
    d = json.load(f)


def comparisons(s):
    return [c for c in s.get("checks") or [] if c.get("kind") == "comparison"]


def interval(c):
    return f"{c['estimate']:.2f}x [{c['ci_low']:.2f}–{c['ci_high']:.2f}]"


if per_comparison:
    print("| scenario | comparison | verdict | cpuwork / best | 95 % interval | margin | pairs | best alternative |")
    print("|---|---|---|---|---|---|---|---|")
    for s in d["scenarios"]:
        if s.get("skipped"):
            print(f"| {s['name']} | | skipped: {s['skipped']} | | | | | |")
            continue
        for c in comparisons(s):
            if c.get("not_judged"):
                print(f"| {s['name']} | {c['label']} | not judged: {c['not_judged']} | | | | | |")
                continue
            print(f"| {s['name']} | {c['label']} | **{c['verdict']}** | {c['estimate']:.2f}x | "
                  f"{c['ci_low']:.2f}–{c['ci_high']:.2f}x | ±{100*c['margin']:.0f} % | {c['pairs']} | {c['best_alternative']} |")
else:
    print("| scenario | answer here | decided (cpuwork / the best alternative [interval]) | not decided in this run |")
    print("|---|---|---|---|")
    judged = decided = 0
    for s in d["scenarios"]:
        if s.get("skipped"):
            print(f"| {s['name']} | skipped: {s['skipped']} | | |")
            continue
        done, open_ = [], []
        for c in comparisons(s):
            if c.get("not_judged"):
                continue
            judged += 1
            if c["verdict"] in ("better", "equivalent", "worse"):
                decided += 1
                done.append(f"{c['label']}: **{c['verdict']}** {interval(c)}")
            else:
                need = c.get("pairs_to_decide")
                open_.append(f"{c['label']}: {interval(c)}" + (f", ~{need} pairs" if need else ""))
        status = s.get("status", "")
        print(f"| {s['name']} | {status} | {'; '.join(done)} | {'; '.join(open_)} |")
    print()
    print(f"{decided} of {judged} judged comparisons decided; comparisons the default run leaves to --thorough are not counted.")
print()
print(f"From `{path}` (seed {d['seed']}, {d['duration_s']/60:.1f} min on {d['machine']['cpus']} CPUs).")
