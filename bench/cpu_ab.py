#!/usr/bin/env python3
"""Alternating A/B of CPU `qmoe bench` rows on the development VM, whose read bandwidth flips between
a slow (~30-37 GB/s) and a fast (~48-65 GB/s) mode minute to minute: each configuration runs REPS
times, round robin, one process per run (`--iters` from $ITERS, default 7), and the medians are
reported per mode (the row's own read probe < 45 GB/s: slow), so that only runs that saw the same
memory are compared.

  bench/cpu_ab.py REPS SCHEME SHAPE M -- CONFIG [CONFIG ...]

A CONFIG is space-separated KEY=VALUE words: bin=PATH picks the CLI (default $QB or build/qmoe),
every other word is set in the run's environment (e.g. "bin=/tmp/qmoe_base" "QMOE_CPU_ACT16=0").
"""
import collections
import os
import statistics
import subprocess
import sys


def main() -> int:
    if len(sys.argv) < 7 or sys.argv[5] != "--":
        print(__doc__)
        return 2
    reps, scheme, shape, m = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    cfgs = sys.argv[6:]
    res = collections.defaultdict(list)
    for _ in range(reps):
        for c in cfgs:
            env = dict(os.environ)
            binary = os.environ.get("QB", "build/qmoe")
            for kv in c.split():
                k, v = kv.split("=", 1)
                if k == "bin":
                    binary = v
                else:
                    env[k] = v
            out = subprocess.run([binary, "bench", "--backend", "cpu", "--shape", shape, "--m", m, "--scheme", scheme,
                                  "--iters", os.environ.get("ITERS", "7")], env=env, capture_output=True, text=True).stdout
            for line in out.splitlines():
                if line.startswith("| ") and "| cpu |" in line:
                    f = [x.strip() for x in line.split("|")]
                    res[c].append((float(f[5]), float(f[8]), float(f[10].rstrip("%"))))

    def summary(rows):
        if not rows:
            return "n=0"
        return (f"n={len(rows)} us_med={statistics.median(r[0] for r in rows):.0f} "
                f"pct_med={statistics.median(r[2] for r in rows):.0f}")

    for c in cfgs:
        rows = res[c]
        slow = [r for r in rows if r[1] < 45]
        fast = [r for r in rows if r[1] >= 45]
        print(f"{c:50s} slow: {summary(slow)} | fast: {summary(fast)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
