#!/usr/bin/env python3
"""Merges `qmoe bench --backend cpu --json` files (bench/cpu_anchor_runs.sh) into docs/perf.md's
CPU table: per (shape, scheme, M) the run with the lowest median time, with that run's own read
bandwidth, floor and load average; ggml ratio (peer/qmoe, > 1: qmoe faster) and, per scheme, the
geometric mean of the ratio over M in {8, 32, 128, 512}.
Usage: bench/merge_cpu_runs.py FILE_OR_DIR... > table.md"""
import glob
import json
import math
import os
import sys

SHAPES = ["qwen3-30b-a3b", "mixtral-8x7b", "llama4-scout", "deepseek-v3", "gpt-oss-120b"]
SCHEMES = ["bf16", "int4-g32", "int8", "mxfp4", "nvfp4"]


def load(paths):
    rows = []
    for p in paths:
        files = sorted(glob.glob(os.path.join(p, "*.json"))) if os.path.isdir(p) else [p]
        for f in files:
            with open(f) as fh:
                rows.extend(json.load(fh))
    return rows


def main():
    rows = load(sys.argv[1:])
    best = {}
    for r in rows:
        k = (r["shape"], r["scheme"], r["m"])
        if k not in best or r["us"] < best[k]["us"]:
            best[k] = r
    key = lambda k: (SHAPES.index(k[0]) if k[0] in SHAPES else 99, SCHEMES.index(k[1]) if k[1] in SCHEMES else 99, k[2])
    print("| shape | M | scheme | µs (median) | read GB/s (same run) | GB/s moved | % of floor | % of dot peak | load | ggml 2·up+down µs | ggml / qmoe |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    geo = {}
    for k in sorted(best, key=key):
        r = best[k]
        flops = r["tflops"] * r["us"] * 1e6  # TFLOP/s x us = MFLOP... kept as a ratio below
        peak = r["int8_gops"] if r["scheme"].startswith("w8a8") or r["scheme"] == "w4a8-int8" else r["bf16_gflops"]
        pct_peak = 100 * r["tflops"] * 1e3 / peak if peak > 0 else 0
        peer = f'{r["peer_us"]:.0f} ({r["peer"].replace("ggml ", "")})' if r["peer_us"] > 0 else "-"
        ratio = f'{r["ratio_peer"]:.2f}x' if r["ratio_peer"] > 0 else "-"
        load_avg = f'{r.get("load_avg", -1):.1f}' if r.get("load_avg", -1) >= 0 else "-"
        print(f'| {r["shape"]} | {r["m"]} | {r["scheme"]} | {r["us"]:.0f} | {r["read_gbps"]:.1f} | {r["tbps"] * 1e3:.1f} | '
              f'{r["pct_floor"]:.0f}% | {pct_peak:.0f}% | {load_avg} | {peer} | {ratio} |')
        if r["ratio_peer"] > 0 and r["m"] >= 8:
            geo.setdefault(r["scheme"], []).append(math.log(r["ratio_peer"]))
            geo.setdefault("all", []).append(math.log(r["ratio_peer"]))
        del flops
    print()
    for s in SCHEMES + ["all"]:
        if s in geo:
            v = geo[s]
            print(f"- geomean ggml/qmoe, {s}, {len(v)} rows with M >= 8: {math.exp(sum(v) / len(v)):.2f}x")
    dev = next(iter(best.values()))
    print(f'\nDevice: {dev["device"]}; dot peaks measured in the runs: bf16 {dev["bf16_gflops"]:.0f} GFLOP/s, int8 {dev["int8_gops"]:.0f} GOP/s.')


if __name__ == "__main__":
    main()
