#!/usr/bin/env python3
"""Merges `qmoe bench --backend cpu --json` files (bench/cpu_anchor_runs.sh) into docs/perf.md's
CPU table: per (shape, scheme, M) the run with the lowest median time, with that run's own read
bandwidth, floor and load average; ggml ratio (peer/qmoe, > 1: qmoe faster) and, per scheme, the
geometric mean of the ratio over M in {8, 32, 128, 512}.
With --ggml FILE (bench/ggml/run.sh's JSON, measured on this machine), ggml's 2 x up + down comes
from that file instead of the anchors.md figures compiled into the bench (the best of q4_0 / q4_K
for int4-g32; q8_0 for int8; mxfp4; bf16; the median of each op).
Usage: bench/merge_cpu_runs.py [--ggml GGML.json] FILE_OR_DIR... > table.md"""
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


GGML_TYPES = {"int4-g32": ["q4_0", "q4_K"], "int8": ["q8_0"], "mxfp4": ["mxfp4"], "bf16": ["bf16"]}


def ggml_layers(path):
    """(shape, scheme, m) -> (2 x up + down us, type) from bench/ggml/run.sh's JSON."""
    ops = {}
    for r in json.load(open(path)):
        ops[(r["shape"], r["type"], r["m"], r["proj"])] = r["us"]
    out = {}
    for (shape, t, m, proj) in list(ops):
        for scheme, types in GGML_TYPES.items():
            if t not in types or proj != "up" or (shape, t, m, "down") not in ops:
                continue
            us = 2 * ops[(shape, t, m, "up")] + ops[(shape, t, m, "down")]
            k = (shape, scheme, m)
            if k not in out or us < out[k][0]:
                out[k] = (us, t)
    return out


def main():
    args = sys.argv[1:]
    ggml = None
    if len(args) >= 2 and args[0] == "--ggml":
        ggml = ggml_layers(args[1])
        args = args[2:]
    rows = load(args)
    if ggml is not None:
        for r in rows:
            us, t = ggml.get((r["shape"], r["scheme"], r["m"]), (-1, ""))
            r["peer_us"], r["peer"] = us, f"ggml {t} here" if us > 0 else ""
            r["ratio_peer"] = us / r["us"] if us > 0 else -1
    # The dot peaks are register-only loops measured once per run: a run whose probe was preempted
    # reports a low peak. The machine's peak is the best any run measured; floors use it.
    peak_bf16 = max(r["bf16_gflops"] for r in rows)
    peak_int8 = max(r["int8_gops"] for r in rows)
    # runs before the thirty-ninth session had no int16 probe: their "/s16" rows (avx2, vpmaddwd) used
    # the int8 one, which was the same instruction there
    peak_int16 = max(r.get("int16_gops", r["int8_gops"]) for r in rows)
    # runs before the fortieth session had no fp32 FMA probe (and no "/f32" rows)
    peak_fma = max(r.get("fma_gflops", 0) for r in rows)
    for r in rows:
        moved = r["tbps"] * 1e12 * r["us"] * 1e-6  # bytes of the floor (weights touched + in/out)
        flops = r["tflops"] * 1e12 * r["us"] * 1e-6
        # int8 activations multiply on the int8 instruction, layers whose activations enter as 16-bit
        # integer codes ("/s16") on the int16 one
        s16 = r.get("kernel", "").endswith("/s16")
        f32 = r.get("kernel", "").endswith("/f32")  # bf16 weights on fp32 FMAs
        int8 = r["scheme"] in ("w8a8-int8", "w4a8-int8")
        peak = (peak_int16 if s16 else peak_fma if f32 else peak_int8 if int8 else peak_bf16) * 1e9
        r["floor_us"] = max(moved / (r["read_gbps"] * 1e9), flops / peak) * 1e6
        r["pct_floor"] = 100 * r["floor_us"] / r["us"]
        r["pct_peak"] = 100 * flops / (r["us"] * 1e-6) / peak
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
        pct_peak = r["pct_peak"]
        peer = f'{r["peer_us"]:.0f} ({r["peer"].replace("ggml ", "")})' if r["peer_us"] > 0 else "-"
        ratio = f'{r["ratio_peer"]:.2f}x' if r["ratio_peer"] > 0 else "-"
        load_avg = f'{r.get("load_avg", -1):.1f}' if r.get("load_avg", -1) >= 0 else "-"
        print(f'| {r["shape"]} | {r["m"]} | {r["scheme"]} | {r["us"]:.0f} | {r["read_gbps"]:.1f} | {r["tbps"] * 1e3:.1f} | '
              f'{r["pct_floor"]:.0f}% | {pct_peak:.0f}% | {load_avg} | {peer} | {ratio} |')
        if r["ratio_peer"] > 0 and r["m"] >= 8:
            geo.setdefault(r["scheme"], []).append(math.log(r["ratio_peer"]))
            geo.setdefault("all", []).append(math.log(r["ratio_peer"]))
    print()
    for s in SCHEMES + ["all"]:
        if s in geo:
            v = geo[s]
            print(f"- geomean ggml/qmoe, {s}, {len(v)} rows with M >= 8: {math.exp(sum(v) / len(v)):.2f}x")
    dev = next(iter(best.values()))
    print(f'\nDevice: {dev["device"]}; dot peaks (best of the runs): bf16 {peak_bf16:.0f} GFLOP/s, int8 {peak_int8:.0f} GOP/s, '
          f'int16 {peak_int16:.0f} GOP/s, fp32 FMA {peak_fma:.0f} GFLOP/s.')


if __name__ == "__main__":
    main()
