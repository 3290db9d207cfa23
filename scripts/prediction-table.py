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

Usage: scripts/prediction-table.py SERVER=FILE...   (SERVER: the row's name)
"""
import re
import statistics
import sys

SECTION = re.compile(r"^## (?P<cond>.+?) \((?P<n>\d+) pairs\)(?P<cpus>, replayed with --cpus (?P<c>[\d.]+)(?P<t> --throttle)?)?$")
PAIR = re.compile(r"^pair \d+: \d+ requests; predicted .*?refused (?P<pr>[\d.]+) %, p99 served (?P<pp>\d+) ms; .*?\| measured .*?refused (?P<mr>[\d.]+) %, p99 served (?P<mp>\d+) ms;")
GEO = re.compile(r"^goodput ratio cpuwork / best peer: predicted geomean (?P<pg>[\d.]+) .*?; measured geomean (?P<mg>[\d.]+), range (?P<lo>[\d.]+)-(?P<hi>[\d.]+)")
GEO_PRED = re.compile(r"^goodput ratio cpuwork / best peer: predicted geomean (?P<pg>[\d.]+)")
REFUSED = re.compile(r"^cpuwork refused: predicted mean (?P<pr>[\d.]+) %(?:, measured mean (?P<mr>[\d.]+) %)?")


def sections(path):
    out, cur = [], None
    for line in open(path, encoding="utf-8"):
        line = line.rstrip("\n")
        m = SECTION.match(line)
        if m:
            cur = {"cond": m["cond"], "cpus": m["c"], "throttle": bool(m["t"]), "pred_p99": [], "meas_p99": []}
            out.append(cur)
            continue
        if cur is None:
            continue
        if m := PAIR.match(line):
            cur["pred_p99"].append(int(m["pp"]))
            cur["meas_p99"].append(int(m["mp"]))
        elif m := GEO.match(line):
            cur.update(pg=m["pg"], mg=m["mg"], lo=m["lo"], hi=m["hi"])
        elif m := GEO_PRED.match(line):
            cur["pg"] = m["pg"]
        elif m := REFUSED.match(line):
            cur["pr"], cur["mr"] = m["pr"], m["mr"]
    return out


def ms(v):
    return f"{statistics.median(v):.0f} ms"


def main(args):
    if not args:
        sys.exit(__doc__)
    print("| server, condition | goodput ratio cpuwork / best peer: predicted (geo-mean of 4) | measured (geo-mean; range of the 4 pairs) | cpuwork refused: predicted | measured | cpuwork p99 of served: predicted (median of the pairs) | measured (median; range) |")
    print("|---|---|---|---|---|---|---|")
    files = []
    for arg in args:
        server, _, path = arg.partition("=")
        files.append(path)
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
    print("From " + ", ".join(f"`{f}`" for f in files) + ".")


if __name__ == "__main__":
    main(sys.argv[1:])
