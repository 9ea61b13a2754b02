#!/usr/bin/env python3
"""Markdown tables for docs/perf.md from `qmoe bench --backend cuda --json` files.

  bench/perf_table.py NOW.json [PREV.json] [--label PREV_LABEL] [--override OVR.json ...]

Backend I schemes (bf16 / fp8 / int4) get one row per (shape, M, scheme) with time, bandwidth,
rate, floor, % of floor, the peer figure of anchors.md and the ratio to it, and (with PREV) the
previous time and PREV / NOW; then per scheme the geometric mean of peer / qmoe, the rows slower
than the peer, the % of floor at M = 4096 and the int4 targets. Backend II schemes get one
compact table (µs, % of floor, TB/s, [PREV µs]). --override replaces rows of NOW with the rows
of another JSON (e.g. rows re-measured after a later selection change), marked with *.
"""
import json
import lzma
import math
import sys


def load(path):
    # (docs/gpu_logs keeps the rows xz-compressed: *.json.xz)
    f = lzma.open(path) if path.endswith(".xz") else open(path)
    return {(r["shape"], r["m"], r["scheme"]): r for r in json.load(f)}


def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def main(argv):
    args, label, overrides = [], "prev", []
    i = 0
    while i < len(argv):
        if argv[i] == "--label":
            label = argv[i + 1]
            i += 2
        elif argv[i] == "--override":
            overrides.append(argv[i + 1])
            i += 2
        else:
            args.append(argv[i])
            i += 1
    now = load(args[0])
    prev = load(args[1]) if len(args) > 1 else {}
    marked = set()
    for o in overrides:
        for k, r in load(o).items():
            if k in now:
                now[k] = r
                marked.add(k)
    shapes = []
    for k in now:
        if k[0] not in shapes:
            shapes.append(k[0])
    b1 = [s for s in ("bf16", "fp8", "int4") if any(k[2] == s for k in now)]
    if b1:
        head = "| shape | M | scheme | µs | TB/s | TFLOP/s | floor µs | % floor | peer µs | peer / qmoe |"
        sep = "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"
        if prev:
            head += f" {label} µs | {label} / now |"
            sep += "---:|---:|"
        print(head + " kernels |")
        print(sep + "---|")
        for s in b1:
            for sh in shapes:
                for m in sorted({k[1] for k in now if k[0] == sh and k[2] == s}):
                    r = now[(sh, m, s)]
                    star = "*" if (sh, m, s) in marked else ""
                    line = (f"| {sh} | {m} | {s} | {r['us']:.1f}{star} | {r['tbps']:.2f} | {r['tflops']:.0f} | "
                            f"{r['floor_us']:.1f} | {r['pct_floor']:.0f} | {r.get('peer_us', 0):.1f} | "
                            f"{r.get('ratio_peer', 0):.2f} |")
                    if prev:
                        p = prev.get((sh, m, s))
                        line += f" {p['us']:.1f} | {p['us'] / r['us']:.2f} |" if p else " - | - |"
                    kern = r.get("kernel", "").split(" ", 1)[-1]
                    print(line + f" {kern} |")
        print()
        for s in b1:
            rows = [now[k] for k in now if k[2] == s]
            g = geomean([r.get("ratio_peer", 0) for r in rows])
            slower = sum(1 for r in rows if r.get("ratio_peer", 1) < 1)
            f4096 = ", ".join(f"{sh} {now[(sh, 4096, s)]['pct_floor']:.0f}" for sh in shapes if (sh, 4096, s) in now)
            line = f"- {s}: geomean peer/qmoe **{g:.2f}** over {len(rows)} rows; {slower} rows slower than the peer"
            if prev:
                gp = geomean([prev[k]["us"] / now[k]["us"] for k in now if k[2] == s and k in prev])
                line += f"; geomean {label}/now {gp:.3f}"
            print(line + f"; % floor at M = 4096: {f4096}")
        if "int4" in b1:
            small = ", ".join(f"{k[0]} M={k[1]} {now[k]['pct_floor']:.0f}" for k in sorted(now)
                              if k[2] == "int4" and k[1] <= 16)
            print(f"- int4 % floor at M <= 16: {small}")
            n4 = sum(1 for k in now if k[2] == "int4" and now[k].get("ratio_peer", 0) >= 4)
            t4 = sum(1 for k in now if k[2] == "int4")
            print(f"- int4 rows >= 4x vLLM-Triton: {n4} of {t4}")
        print()
    b2 = [s for s in ("nvfp4a16", "mxfp4", "nvfp4", "w4a8-fp8", "w4a8-int8", "w8a8-int8") if any(k[2] == s for k in now)]
    if b2:
        print("| shape | M | " + " | ".join(f"{s} µs (% floor, TB/s)" + (f" [{label}]" if prev else "") for s in b2) + " |")
        print("|---|---:|" + "---:|" * len(b2))
        for sh in shapes:
            for m in sorted({k[1] for k in now if k[0] == sh and k[2] in b2}):
                cells = []
                for s in b2:
                    r = now.get((sh, m, s))
                    if not r:
                        cells.append("—")
                        continue
                    c = f"{r['us']:.1f} ({r['pct_floor']:.0f}, {r['tbps']:.2f})"
                    if prev and (sh, m, s) in prev:
                        c += f" [{prev[(sh, m, s)]['us']:.0f}]"
                    cells.append(c)
                print(f"| {sh} | {m} | " + " | ".join(cells) + " |")
        print()
        for s in b2:
            if prev:
                gp = geomean([prev[k]["us"] / now[k]["us"] for k in now if k[2] == s and k in prev])
                print(f"- {s}: geomean {label}/now {gp:.3f} over {sum(1 for k in now if k[2] == s)} rows")


if __name__ == "__main__":
    main(sys.argv[1:])
