#!/usr/bin/env python3
"""Re-judge the mixed scenarios' "batch work done" checks from their
checked-in results (.json.xz) on the totals over the pairs, as the engine
now does when cpuwork's side is zero in a pair (verdict.go, zeroLoss):
the judged variant's total against the best alternative's (the one with
the largest total), and the pairs where cpuwork did none."""
import json, lzma, sys

for f in sys.argv[1:]:
    d = json.load(lzma.open(f))
    for s in d['scenarios']:
        var = {v['name']: v for v in s['variants']}
        for c in s.get('checks', []):
            if 'batch work done' not in c['label']:
                continue
            met = c['metric']
            jv = [r.get('extra', {}).get(met) for r in var[c['judged']]['repeats']]
            best, bt = None, -1.0
            for a in c.get('against', []):
                t = sum(x for x in (r.get('extra', {}).get(met) for r in var[a]['repeats']) if x is not None)
                if t > bt:
                    best, bt = a, t
            tj = sum(x for x in jv if x is not None)
            zeros = sum(1 for x in jv if x == 0)
            if zeros == 0:
                print(f"{f.split('/')[-1]}: {c['label']}: {c['judged']} did some in every pair: judged on the ratios as the run printed ({c.get('verdict') or c.get('not_judged')})")
                continue
            verdict = 'worse' if bt > 0 and tj / bt < 1 / 1.05 else 'inconclusive'
            print(f"{f.split('/')[-1]}: {c['label']}: {c['judged']} did none in {zeros} of {len(jv)} pairs; "
                  f"total {tj:.2f} against {best} {bt:.2f} CPU-s/s = {tj / bt if bt else float('nan'):.2f}x: {verdict}")
