#!/usr/bin/env python3
"""Recomputes the summary figures of README.md and docs/results.md from
the raw runs they cite, and fails on a mismatch.

Two checks:

1. Each figure listed in docs/figures.tsv — a ratio or a range of ratios
   as the page prints it ("0.43–0.46x", "1.22x") — is recomputed from the
   raw runs the row names: the estimate of the named comparison in each
   run's verdict lines ("  - LABEL: VERDICT — cpuwork 0.46x ALT [...]"),
   every estimate within the printed range (min–max at two decimals, or
   the one value). The page must print the figure. A row whose runs give
   no estimate for its comparison fails too: a figure with no source.

2. Each table that README.md or docs/results.md marks as printed by
   scripts/results-table.py (the table that follows the marker line
   naming the script, up to the "From ..." line naming its results.json
   files) is printed again from those files and must match line for
   line; so is each marked as printed by a scripts/prediction-table.py
   or scripts/fidelity-table.py command, given whole in backticks on its
   marker line.

Usage: scripts/check-claims.py  (exit 0: every figure matches)
"""
import os
import re
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
os.chdir(ROOT)

VERDICT = re.compile(
    r"^\s*- (?P<label>.+?): (?P<verdict>better|equivalent|worse|inconclusive) — "
    r"(?P<judged>\S+) (?P<est>\d+(?:\.\d+)?)x (?P<alt>\S+) \[")
SCENARIO = re.compile(r"^== ([a-z0-9-]+) ==$")
# scripts/batch-totals.py's lines: a comparison judged on its totals.
TOTALS = re.compile(r"^(?P<run>\S+\.json(?:\.xz)?): (?P<label>.+?): .* = (?P<est>\d+(?:\.\d+)?)x: (?:better|equivalent|worse|inconclusive)$")


def estimates(path):
    """(scenario, label) -> estimate for every judged comparison of a run."""
    out = {}
    scenario = ""
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = SCENARIO.match(line.rstrip("\n"))
            if m:
                scenario = m.group(1)
                continue
            m = VERDICT.match(line)
            if m:
                out[(scenario, m.group("label"))] = float(m.group("est"))
                continue
            m = TOTALS.match(line.rstrip("\n"))
            if m:  # scenario "totals", one label per run and comparison
                out[("totals", m.group("run") + ": " + m.group("label"))] = float(m.group("est"))
    return out


def fmt(values, figure):
    """values as the page prints figure: one value or a range, at the
    figure's own number of decimals."""
    m = re.search(r"\d+(?:\.(\d+))?x$", figure)
    d = len(m.group(1)) if m and m.group(1) else 0
    lo, hi = min(values), max(values)
    if f"{lo:.{d}f}" == f"{hi:.{d}f}":
        return f"{lo:.{d}f}x"
    return f"{lo:.{d}f}–{hi:.{d}f}x"


def check_figures(failures):
    n = 0
    with open("docs/figures.tsv", encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            cols = line.split("\t")
            if len(cols) != 5:
                failures.append(f"docs/figures.tsv:{i}: want 5 tab-separated columns, got {len(cols)}")
                continue
            page, figure, scenario, labels, files = cols
            n += 1
            values = []
            for path in files.split(","):
                if not os.path.exists(path):
                    failures.append(f"docs/figures.tsv:{i}: {path}: no such raw file")
                    continue
                est = estimates(path)
                for sc in scenario.split("|"):
                    for label in labels.split("|"):
                        if label == "*":  # every comparison of the scenario
                            values += [v for (s2, _), v in est.items() if s2 == sc]
                        elif (sc, label) in est:
                            values.append(est[(sc, label)])
            if not values:
                failures.append(f"docs/figures.tsv:{i}: {scenario} {labels!r}: no verdict line in {files}")
                continue
            got = fmt(values, figure)
            if got != figure:
                failures.append(f"docs/figures.tsv:{i}: {page} prints {figure}, the runs it cites give {got} ({scenario}: {labels})")
            with open(page, encoding="utf-8") as p:
                if figure not in p.read():
                    failures.append(f"docs/figures.tsv:{i}: {page} does not print {figure}")
    return n


def check_tables(failures):
    n = 0
    for page in ("README.md", "docs/results.md"):
        lines = open(page, encoding="utf-8").read().split("\n")
        for i, line in enumerate(lines):
            if re.search(r"scripts/(prediction|fidelity)-table\.py", line) and "prints it" in line:
                n += check_command_table(page, lines, i, failures)
                continue
            if "scripts/results-table.py" not in line or "prints it" not in line:
                continue
            # The table: the next block of lines starting with "|", then
            # the lines up to the one naming the files it came from.
            j = i + 1
            while j < len(lines) and not lines[j].startswith("|"):
                j += 1
            k = j
            while k < len(lines) and not lines[k].startswith("From `"):
                k += 1
            if k == len(lines):
                failures.append(f"{page}:{i+1}: a table marked as printed by results-table.py names no files (a 'From `...`' line)")
                continue
            files = re.findall(r"`(docs/raw/[^`]+\.json(?:\.xz)?)`", lines[k])
            flags = ["--comparisons"] if "--comparisons" in line else []
            printed = subprocess.run([sys.executable, "scripts/results-table.py", *flags, *files],
                                     capture_output=True, text=True)
            if printed.returncode != 0:
                failures.append(f"{page}:{i+1}: results-table.py {' '.join(files)}: {printed.stderr.strip()}")
                continue
            want = printed.stdout.rstrip("\n").split("\n")
            have = lines[j:k + 1]
            n += 1
            if [l.rstrip() for l in have] != [l.rstrip() for l in want]:
                for a, b in zip(have + [""] * len(want), want + [""] * len(have)):
                    if a.rstrip() != b.rstrip():
                        failures.append(f"{page}:{i+1}: the table differs from results-table.py's:\n  page:   {a}\n  script: {b}")
                        break
    return n


def check_command_table(page, lines, i, failures):
    """A table marked by the whole command that prints it, in backticks
    (`scripts/prediction-table.py ARGS` prints it, or fidelity-table.py):
    run it and compare,
    the table and its "From" line."""
    m = re.search(r"`(scripts/(?:prediction|fidelity)-table\.py [^`]+)`", lines[i])
    if not m:
        failures.append(f"{page}:{i+1}: a table marked as printed by a table script names no command in backticks")
        return 0
    j = i + 1
    while j < len(lines) and not lines[j].startswith("|"):
        j += 1
    printed = subprocess.run([sys.executable, *m.group(1).split()], capture_output=True, text=True)
    if printed.returncode != 0:
        failures.append(f"{page}:{i+1}: {m.group(1)}: {printed.stderr.strip()}")
        return 0
    want = printed.stdout.rstrip("\n").split("\n")
    have = lines[j:j + len(want)]
    for a, b in zip(have + [""] * len(want), want):
        if a.rstrip() != b.rstrip():
            failures.append(f"{page}:{i+1}: the table differs from {m.group(1)}'s:\n  page:   {a}\n  script: {b}")
            break
    return 1


def main():
    failures = []
    figures = check_figures(failures)
    tables = check_tables(failures)
    for f in failures:
        print(f)
    if failures:
        sys.exit(1)
    print(f"{figures} summary figures and {tables} tables recomputed from the raw runs they cite: all match")


if __name__ == "__main__":
    main()
