#!/usr/bin/env python3
"""Prints docs/results.md's table of the replay's prediction against the
real run ("Does the replay predict the real run?") from the raw files of
scripts/replay-prediction.py, one per server, in the order given.

For each section of a file ("## CONDITION (N pairs)", and its replay
"with --cpus 1.5", and "--cpus 1.5 --throttle"): the goodput ratio cpuwork / best peer predicted and
measured (geometric means of the pairs, the measured range), cpuwork's
refused share predicted and measured (means), and cpuwork's p99 of
served predicted and measured (medians of the pairs, the measured
range). A --cpus row has no measured figures: the same traces replayed.

With --refused: the table of the refused share's gap at LEVEL %
(default 80; a section whose level is within 2 of it): per section, the
pairs' differences predicted - measured in points, their mean and 95 %
interval (Student's t over the pairs), and whether the gap is within 1
point (the interval inside -1..1), beyond it (the interval outside), or
cannot be told here, with about how many pairs would tell (the pairs'
spread held, z = 1.96) and how long they would take at the file's own
pace (its "took" seconds over the pairs it ran, the capacity search
included: an upper bound).

Usage: scripts/prediction-table.py [--refused [--level LEVEL]] SERVER=FILE...   (SERVER: the row's name)
"""
import math
import re
import statistics
import sys

SECTION = re.compile(r"^## (?P<cond>.+?) \((?P<n>\d+) pairs\)(?P<cpus>, replayed with --cpus (?P<c>[\d.]+)(?P<t> --throttle)?)?$")
PAIR = re.compile(r"^pair \d+: \d+ requests; predicted .*?refused (?P<pr>[\d.]+) %, p99 served (?P<pp>\d+) ms; .*?\| measured .*?refused (?P<mr>[\d.]+) %, p99 served (?P<mp>\d+) ms;")
TOOK = re.compile(r"^took (?P<s>\d+) s$")
LEVEL = re.compile(r"(?P<l>\d+) %$")
# Student's t, two-sided 95 %, by degrees of freedom.
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
        12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042}
GEO = re.compile(r"^goodput ratio cpuwork / best peer: predicted geomean (?P<pg>[\d.]+) .*?; measured geomean (?P<mg>[\d.]+), range (?P<lo>[\d.]+)-(?P<hi>[\d.]+)")
GEO_PRED = re.compile(r"^goodput ratio cpuwork / best peer: predicted geomean (?P<pg>[\d.]+)")
REFUSED = re.compile(r"^cpuwork refused: predicted mean (?P<pr>[\d.]+) %(?:, measured mean (?P<mr>[\d.]+) %)?")


def sections(path):
    out, cur = [], None
    for line in open(path, encoding="utf-8"):
        line = line.rstrip("\n")
        m = SECTION.match(line)
        if m:
            cur = {"cond": m["cond"], "cpus": m["c"], "throttle": bool(m["t"]), "pred_p99": [], "meas_p99": [], "gap": []}
            out.append(cur)
            continue
        if cur is None:
            continue
        if m := PAIR.match(line):
            cur["pred_p99"].append(int(m["pp"]))
            cur["meas_p99"].append(int(m["mp"]))
            cur["gap"].append(float(m["pr"]) - float(m["mr"]))
        elif m := GEO.match(line):
            cur.update(pg=m["pg"], mg=m["mg"], lo=m["lo"], hi=m["hi"])
        elif m := GEO_PRED.match(line):
            cur["pg"] = m["pg"]
        elif m := REFUSED.match(line):
            cur["pr"], cur["mr"] = m["pr"], m["mr"]
    return out


def pace(path):
    """Seconds a pair took in the file's run: its "took" line over the
    pairs of its sections without --cpus (None: no "took" line)."""
    took = None
    for line in open(path, encoding="utf-8"):
        if m := TOOK.match(line.rstrip("\n")):
            took = int(m["s"])
    pairs = sum(len(s["gap"]) for s in sections(path) if not s["cpus"])
    return took / pairs if took and pairs else None


def t975(df):
    return T975[max(k for k in T975 if k <= df)]


def servers(args):
    """(server, path) for each SERVER=FILE argument."""
    return [tuple(arg.partition("=")[::2]) for arg in args]


def from_line(pairs):
    return "From " + ", ".join(f"`{path}`" for _, path in pairs) + "."


def refused(args, level):
    print("| server, condition | pairs | refused share, predicted - measured: mean | 95 % interval | within 1 point? |")
    print("|---|---|---|---|---|")
    pairs = servers(args)
    for server, path in pairs:
        per = pace(path)
        for s in sections(path):
            m = LEVEL.search(s["cond"])
            if not m or abs(int(m["l"]) - level) > 2:
                continue
            g = s["gap"]
            n, mean, sd = len(g), statistics.mean(g), statistics.stdev(g)
            half = t975(n - 1) * sd / math.sqrt(n)
            lo, hi = mean - half, mean + half
            if -1 < lo and hi < 1:
                verdict = "within 1 point"
            elif hi < -1 or lo > 1:
                verdict = "beyond 1 point"
            elif abs(abs(mean) - 1) < 1e-9:
                verdict = "cannot tell here: the mean sits at 1 point"
            else:
                need = math.ceil((1.96 * sd / abs(abs(mean) - 1)) ** 2)
                took = f" / {math.ceil(need * per / 60)} minutes" if per else ""
                verdict = f"cannot tell here: about {need} pairs{took}"
            cond = s["cond"].replace("200 %", "2x")
            if s["cpus"]:
                cond += f", `--cpus {s['cpus']}" + (" --throttle" if s["throttle"] else "") + "`"
            print(f"| {server}, {cond} | {n} | {mean:+.1f} | {lo:+.1f} to {hi:+.1f} | {verdict} |")
    print(from_line(pairs))


def ms(v):
    return f"{statistics.median(v):.0f} ms"


def main(args):
    if not args:
        sys.exit(__doc__)
    if args[0] == "--refused":
        level = 80
        if len(args) > 2 and args[1] == "--level":
            level, args = int(args[2]), args[3:]
        else:
            args = args[1:]
        return refused(args, level)
    print("| server, condition | goodput ratio cpuwork / best peer: predicted (geo-mean of 4) | measured (geo-mean; range of the 4 pairs) | cpuwork refused: predicted | measured | cpuwork p99 of served: predicted (median of the pairs) | measured (median; range) |")
    print("|---|---|---|---|---|---|---|")
    pairs = servers(args)
    for server, path in pairs:
        secs = sections(path)
        for s in secs:
            if "pg" not in s or "pr" not in s:
                sys.exit(f"{path}: section {s['cond']!r}: no summary lines")
        # Each condition's row, then its replay under --cpus (the file
        # has those at its end).
        for s in (s for s in secs if not s["cpus"]):
            cond = s["cond"].replace("200 %", "2x")
            print(f"| {server}, {cond} | {s['pg']} | {s['mg']}; {s['lo']}–{s['hi']} | {s['pr']} % | {s['mr']} % | "
                  f"{ms(s['pred_p99'])} | {ms(s['meas_p99'])}; {min(s['meas_p99'])}–{max(s['meas_p99'])} ms |")
            for c in (c for c in secs if c["cpus"] and c["cond"] == s["cond"]):
                flags = f"--cpus {c['cpus']}" + (" --throttle" if c["throttle"] else "")
                print(f"| same, `{flags}` | {c['pg']} | | {c['pr']} % | | {ms(c['pred_p99'])} | |")
    print(from_line(pairs))


if __name__ == "__main__":
    main(sys.argv[1:])
