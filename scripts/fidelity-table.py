#!/usr/bin/env python3
"""Print the simulator's fidelity table: each decided real verdict of the
admission policy in the default runs named, beside the ratio the
simulator gives for the same comparison.

Usage: scripts/fidelity-table.py SIM.json[.xz] RUN.txt...

SIM is `cpuwork simulate --json` over the scenarios and loads below (the
command is in docs/raw/INDEX.md beside the file). Each RUN is a default
bench run's text output. The rows are declared here, by rule, before any
ratio is compared: every verdict a RUN decided (better, equivalent or
worse) in the scenarios the simulator replays (service, inference,
priority, burst, burst-long), in run order. A comparison the simulator
cannot make (beside a CPU-bound process, in a cgroup: the runtime's
part) is printed with the reason instead of a ratio. A simulated ratio
"agrees" when it lies inside the real interval, "same way" when it is
outside it but on the same side of 1 (or both within the A/A margin for
an equivalent verdict), and "differs" otherwise.
"""
import json
import lzma
import re
import sys

# The bench's peer names as the simulator models them.
PEERS = {
    "pool-503": "pool-503",
    "sem-deadline": "sem-deadline",
    "pool": "pool",
    "semaphore": "semaphore",
    "errgroup": "semaphore",  # errgroup.Group with SetLimit(P): a semaphore of P
    "goroutine": "goroutines",
    "goroutines": "goroutines",
    "goroutines-yield": "goroutines-yield",
}

VERDICT = re.compile(
    r"^  - (?P<label>[^:]+(?::[^—]*?)?): (?P<verdict>better|worse|equivalent) — "
    r"cpuwork(?P<cw>\S*) (?P<ratio>[\d.]+)x (?P<peer>\S+) \[(?P<level>[\d.]+)% CI (?P<lo>[\d.]+)-(?P<hi>[\d.]+)x\]")


def load_sim(path):
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def sim_workload(sim, name):
    for w in sim:
        if w["workload"] == name:
            return w
    raise SystemExit(f"fidelity-table.py: the simulation has no workload {name!r}")


def group(w, policy, cls):
    for p in w["policies"]:
        if p["policy"] == policy:
            for g in p["classes"]:
                if g["class"] == cls:
                    return g
    raise SystemExit(f"fidelity-table.py: {w['workload']}: no {policy} {cls}")


def capacity(sim, scenario, policy):
    """The highest simulated load at which policy's p99 of all requests
    is within the objective (loads of the grid SIM holds)."""
    best = None
    for w in sim:
        m = re.fullmatch(re.escape(scenario) + r" at (\d+)%", w["workload"])
        if not m:
            continue
        g = group(w, policy, "interactive")
        if g["p99_all_s"] is not None and g["p99_all_s"] <= g["objective_s"]:
            load = int(m.group(1)) / 100
            best = load if best is None else max(best, load)
    return best


def simulated(sim, scenario, label, peer):
    """The simulated ratio cpuwork/peer for the real comparison, or the
    reason it is not simulated."""
    if "nice0" in label or "cgroup" in label:
        return None, "not simulated: " + ("a CPU-bound process beside" if "nice0" in label else "a CPU quota (throttling)")
    sp = PEERS.get(peer)
    if sp is None:
        return None, f"not simulated: no model of {peer}"
    if scenario in ("service", "inference"):
        if label.startswith("capacity at the objective"):
            a, b = capacity(sim, scenario, "cpuwork"), capacity(sim, scenario, sp)
            if a is None or b is None:
                return None, "not simulated: no load of the grid within the objective"
            return a / b, ""
        m = re.match(r"(\d+)%: (.*)", label)
        w = sim_workload(sim, f"{scenario} at {m.group(1)}%")
        field = "goodput_cpu_s_per_s" if m.group(2).startswith("goodput") else "p99_served_s"
        a, b = group(w, "cpuwork", "interactive")[field], group(w, sp, "interactive")[field]
    elif scenario == "priority":
        w = sim_workload(sim, "priority")
        if "critical p99" in label:
            a, b = group(w, "cpuwork", "critical")["p99_all_s"], group(w, sp, "critical")["p99_all_s"]
        else:
            a, b = group(w, "cpuwork", "batch")["goodput_cpu_s_per_s"], group(w, sp, "batch")["goodput_cpu_s_per_s"]
    else:  # burst, burst-long
        w = sim_workload(sim, scenario)
        field = "makespan_s" if label == "makespan" else "mean_served_s"
        a, b = group(w, "cpuwork", "interactive")[field], group(w, sp, "interactive")[field]
    if a is None or b in (None, 0):
        return None, "not simulated: a figure is missing"
    return a / b, ""


def judge(verdict, real, sim, lo, hi):
    """agrees: sim inside the real interval; same way: outside it, but
    on the real ratio's side of 1 beyond the 5 % margin (within it, for
    an equivalent verdict); differs: otherwise."""
    if lo <= sim <= hi:
        return "agrees"
    if verdict == "equivalent":
        return "same way" if abs(sim - 1) <= 0.05 else "differs"
    return "same way" if (sim < 1) == (real < 1) and abs(sim - 1) > 0.05 else "differs"


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    sim = load_sim(sys.argv[1])
    print("| run | scenario | comparison | real verdict | real ratio [interval] | simulated ratio (peer as modelled) | |")
    print("|---|---|---|---|---|---|---|")
    counts = {}
    for run in sys.argv[2:]:
        seed = re.search(r"seed(\d+)", run).group(1)
        scenario = None
        for line in open(run, encoding="utf-8"):
            if line.startswith("== "):
                scenario = line.strip("= \n")
                continue
            m = VERDICT.match(line)
            if not m or scenario not in ("service", "inference", "priority", "burst", "burst-long"):
                continue
            label, verdict, peer = m["label"], m["verdict"], re.sub(r"[@+].*", "", m["peer"])
            lo, hi, ratio = float(m["lo"]), float(m["hi"]), float(m["ratio"])
            r, why = simulated(sim, scenario, label, peer)
            if r is None:
                got, mark = why, "—"
            else:
                mark = judge(verdict, ratio, r, lo, hi)
                got = f"{r:.2f}x ({PEERS[peer]})"
            counts[mark] = counts.get(mark, 0) + 1
            short = re.sub(r"(goodput within the objective|capacity at the objective).*", r"\1", label)
            print(f"| {seed} | {scenario} | {short} vs {peer} | {verdict} | {ratio:.2f}x [{lo:.2f}–{hi:.2f}] | {got} | {mark} |")
    order = ["agrees", "same way", "differs", "—"]
    print()
    print("Rows: " + ", ".join(f"{counts.get(k, 0)} {k if k != '—' else 'not simulated'}" for k in order) + ".")


if __name__ == "__main__":
    main()
