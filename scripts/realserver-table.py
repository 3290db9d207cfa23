#!/usr/bin/env python3
"""Prints docs/realserver.md's tables from a realserver scenario's
results.json (realserver, realserver-opa or realserver-step): the verdicts
against the best peer, then every variant's figures per case (medians
over the pairs).

Usage: scripts/realserver-table.py docs/raw/<realserver-run>.json
"""
import json
import statistics
import sys

path = sys.argv[1]
d = json.load(open(path))
s = next(s for s in d["scenarios"] if s["name"].startswith("realserver"))

print("| comparison | verdict | cpuwork / best | 95 % interval | pairs | best peer |")
print("|---|---|---|---|---|---|")
for c in s.get("checks") or []:
    if c.get("kind") != "comparison":
        continue
    if c.get("not_judged"):
        print(f"| {c['label']} | not judged: {c['not_judged']} | | | | |")
        continue
    print(f"| {c['label']} | **{c['verdict']}** | {c['estimate']:.2f}x | {c['ci_low']:.2f}–{c['ci_high']:.2f}x | {c['pairs']} | {c['best_alternative']} |")
print()

variants = {v["name"]: v for v in s["variants"]}


def med(v, key):
    xs = [r["extra"][key] for r in v.get("repeats") or [] if key in (r.get("extra") or {})]
    return statistics.median(xs) if xs else None




def pct(x):
    return "" if x is None else f"{100 * x:.0f} %"


if s["name"].endswith("-step"):
    for case, title in (("", "2 cores"), ("+quota1.5", "1.5-CPU cgroup")):
        for level in ("140", "300"):
            if f"cpuwork{case}@{level}%" not in variants:
                continue
            print(f"| {title}, step 80 % → {level} % | p99 of served after | goodput after (CPU-s/s) | back under the objective after | runs recovered | shed CV after | shed | client gave up | CPU on abandoned requests (of the slots') |")
            print("|---|---|---|---|---|---|---|---|---|")
            for name in ("stock", "sem", "sem2x", "failsafe", "gradient2", "cpuwork"):
                v = variants.get(f"{name}{case}@{level}%")
                if v is None or not v.get("repeats"):
                    continue
                rec = [r["extra"].get("recovered", 0) for r in v.get("repeats") or []]
                p99 = med(v, 'p99_after_step_s')
                print(f"| {name} | {'' if p99 is None else f'{1000 * p99:.0f} ms'} | {med(v, 'goodput_after_step_cpu_per_s'):.2f} | "
                      f"{1000 * med(v, 'recovery_s'):.0f} ms | {int(sum(rec))} of {len(rec)} | {med(v, 'shed_cv'):.2f} | "
                      f"{pct(med(v, 'shed_share'))} | {pct(med(v, 'gave_up_share'))} | {pct(med(v, 'abandoned_cpu_share'))} |")
            print()
else:
    for case, title in (("", "2 cores"), ("+quota1.5", "1.5-CPU cgroup")):
        if f"cpuwork{case}@200%" not in variants:
            continue
        quota = case != ""
        head = f"| {title} | p99 of all at 80 % | p99 of served at 2x | goodput at 2x | served late at 2x | shed at 2x | cores used at 2x |"
        sep = "|---|---|---|---|---|---|---|"
        if quota:
            head += " periods throttled at 2x |"
            sep += "---|"
        print(head)
        print(sep)
        for name in ("stock", "sem", "sem2x", "failsafe", "gradient2", "cpuwork"):
            a, b = variants.get(f"{name}{case}@80%"), variants.get(f"{name}{case}@200%")
            if a is None or b is None:
                continue
            row = (f"| {name} | {1000 * med(a, 'p99_all_s'):.0f} ms | {1000 * b['latency']['p99_s']:.0f} ms | "
                   f"{med(b, 'goodput_cpu_per_s'):.2f} | {100 * med(b, 'served_late_share'):.0f} % | "
                   f"{100 * med(b, 'shed_share'):.0f} % | {med(b, 'server_cores'):.2f} |")
            if quota:
                row += f" {100 * med(b, 'throttled_share'):.0f} % |"
            print(row)
        print()
print(f"From `{path}` (seed {d['seed']}, {d['duration_s'] / 60:.1f} min on {d['machine']['cpus']} CPUs).")
