#!/usr/bin/env python3
"""Prints README's results table from default bench runs' results.json:
one row per declared question (the run's "answers"), one column per run,
each with its verdict, estimate and interval, or "cannot tell here" with
the pairs that would decide it, then each run's count. With
--comparisons, one row per comparison of one run instead (verdict,
estimate, interval at its printed level, margin, pairs, best
alternative).

Usage: scripts/results-table.py [--comparisons] RUN.json[.xz] [RUN2.json[.xz] ...]
"""
import json
import lzma
import sys

args = [a for a in sys.argv[1:] if not a.startswith("--")]
per_comparison = "--comparisons" in sys.argv[1:]
if not args or (per_comparison and len(args) != 1):
    sys.exit(__doc__)


def load(path):
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt") as f:
        return json.load(f)


runs = [load(p) for p in args]


def comparisons(s):
    return [c for c in s.get("checks") or [] if c.get("kind") == "comparison"]


def interval(c):
    return f"{c['estimate']:.2f}x [{c['ci_low']:.2f}–{c['ci_high']:.2f}]"


def level(c):
    lv = c.get("level")
    return f"{100*lv:.1f} %" if lv else "95 %"


def check_of(run, scenario, question):
    for s in run["scenarios"]:
        if s["name"] != scenario:
            continue
        for c in comparisons(s):
            if c["label"] == question or c["label"].startswith(question + ": ") or c["label"].startswith(question + " ("):
                return c
    return None


def cell(run, a):
    c = check_of(run, a["scenario"], a["question"])
    v = a.get("verdict", "")
    if v in ("better", "equivalent", "worse"):
        return f"**{v}** {interval(c)}"
    if v == "inconclusive":
        need = a.get("pairs_to_decide")
        if need and need >= 1000:
            return f"{interval(c)}, cannot tell here (over 1,000 pairs)"
        return f"{interval(c)}, cannot tell here" + (f" (~{need} pairs)" if need else "")
    return a.get("why", "")


if per_comparison:
    d = runs[0]
    print("| scenario | comparison | verdict | cpuwork / best | interval | level | margin | pairs | best alternative |")
    print("|---|---|---|---|---|---|---|---|---|")
    for s in d["scenarios"]:
        if s.get("skipped"):
            print(f"| {s['name']} | | skipped: {s['skipped']} | | | | | | |")
            continue
        for c in comparisons(s):
            if c.get("not_judged"):
                print(f"| {s['name']} | {c['label']} | not judged: {c['not_judged']} | | | | | | |")
                continue
            print(f"| {s['name']} | {c['label']} | **{c['verdict']}** | {c['estimate']:.2f}x | "
                  f"{c['ci_low']:.2f}–{c['ci_high']:.2f}x | {level(c)} | ±{100*c['margin']:.0f} % | {c['pairs']} | {c['best_alternative']} |")
    print()
    print(f"From `{args[0]}` (seed {d['seed']}, {d['duration_s']/60:.1f} min on {d['machine']['cpus']} CPUs).")
    sys.exit(0)

for p, d in zip(args, runs):
    if not d.get("answers"):
        sys.exit(f"{p}: no answers to the declared questions (a run before they were declared)")
keys = [(a["scenario"], a["question"]) for a in runs[0]["answers"]]
for p, d in zip(args[1:], runs[1:]):
    if [(a["scenario"], a["question"]) for a in d["answers"]] != keys:
        sys.exit(f"{p}: its declared questions differ from {args[0]}'s: compare runs of one list")

print("| scenario | question | " + " | ".join(f"seed {d['seed']}" for d in runs) + " |")
print("|---|---|" + "---|" * len(runs))
for i, (scenario, question) in enumerate(keys):
    print(f"| {scenario} | {question} | " + " | ".join(cell(d, d["answers"][i]) for d in runs) + " |")
print()
for d in runs:
    count = {}
    for a in d["answers"]:
        v = a.get("verdict", "")
        k = {"inconclusive": "cannot tell here"}.get(v, v) or ("not asked" if a.get("why", "").startswith("not asked") else "not judged")
        count[k] = count.get(k, 0) + 1
    decided = sum(count.get(k, 0) for k in ("better", "equivalent", "worse"))
    parts = ", ".join(f"{k} {count[k]}" for k in ("better", "equivalent", "worse", "cannot tell here", "not judged", "not asked") if count.get(k))
    print(f"Seed {d['seed']}: {decided} of {len(d['answers'])} declared questions decided ({parts}), {d['duration_s']/60:.1f} min.")
print()
print("From " + ", ".join(f"`{p}`" for p in args) + f" (on {runs[0]['machine']['cpus']} CPUs).")
