#!/usr/bin/env python3
"""A/B of `qmoe bench --json` rows: two sets of files (e.g. a base binary's and a new one's, run
alternately in one GPU session), matched by (shape, m, scheme); per row the best (lowest) time of
each set, A / B (> 1: B faster), B's % of floor and B against the anchor peer, then the geometric
mean of A / B over the matched rows.
Usage: bench/compare_rows.py 'A_GLOB' 'B_GLOB' [LABEL]     (quote the globs)
Example: bench/compare_rows.py 'r5/fp8_base_*.json' 'r5/fp8_new_*.json' fp8"""
import glob
import json
import lzma
import math
import sys


def load(pattern):
    rows = {}
    for path in sorted(glob.glob(pattern)):
        # (docs/gpu_logs keeps the rows xz-compressed: *.json.xz)
        for r in json.load(lzma.open(path) if path.endswith(".xz") else open(path)):
            rows.setdefault((r["shape"], r["m"], r["scheme"]), []).append(r)
    return rows


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    a, b = load(argv[1]), load(argv[2])
    if not a or not b:
        sys.exit(f"no rows: {argv[1]} ({len(a)}) / {argv[2]} ({len(b)})")
    print(f"## {argv[3] if len(argv) > 3 else argv[1] + ' vs ' + argv[2]}")
    print("| shape | m | scheme | A µs | B µs | A / B | B % floor | peer µs | peer / B |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|")
    ratios = []
    for key in sorted(a, key=lambda k: (k[2], k[0], k[1])):
        if key not in b:
            continue
        ta = min(r["us"] for r in a[key])
        best = min(b[key], key=lambda r: r["us"])
        tb = best["us"]
        peer = best.get("peer_us") or 0
        ratios.append(ta / tb)
        peer_s = f"{peer:.1f} | {peer / tb:.2f}" if peer > 0 else "- | -"
        print(f"| {key[0]} | {key[1]} | {key[2]} | {ta:.1f} | {tb:.1f} | {ta / tb:.2f} | "
              f"{best.get('pct_floor', 0):.0f} | {peer_s} |")
    if ratios:
        g = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        print(f"\ngeomean A / B over {len(ratios)} rows: {g:.3f}")


if __name__ == "__main__":
    main(sys.argv)
