#!/usr/bin/env python3
"""Per-kernel table of one MoE layer from Nsight Compute's text output, e.g. (on the GPU machine)
  ncu --clock-control none -k 'regex:align_|sm90_moe|sm90_gather|reduce_|act_|moe_|route_' -c 8 \\
      --metrics gpu__time_duration.sum,dram__bytes_read.sum \\
      qmoe bench --backend cuda --shape qwen3-30b-a3b --m 4096 --scheme fp8 --iters 1 --warmup 0 > k.txt
(the regex keeps the bench's ceiling kernels, cuBLAS's nvjet_sm90_* among them, out of the count).
Prints per launch: kernel, template arguments, grid, duration, DRAM bytes read; then the sum.
Usage: bench/ncu_kernels.py FILE..."""
import re
import sys

HEAD = re.compile(r"\n  (?=\S.*\(\d+, \d+, \d+\)x\(\d+, \d+, \d+\))")


def to_us(unit, value):
    v = float(value.replace(",", ""))
    return v * {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}.get(unit, 1.0)


def main(paths):
    if not paths:
        sys.exit(__doc__)
    for path in paths:
        text = open(path).read()
        print(f"## {path}")
        total = 0.0
        for block in HEAD.split(text)[1:]:
            first = block.split("\n", 1)[0]
            name = re.sub(r"\(.*", "", first).strip()
            name = re.sub(r".*::", "", re.sub(r"<.*", "", name))
            targs = re.search(r"<(.*)>\(", first)
            grid = re.search(r"\((\d+, \d+, \d+)\)x\((\d+, \d+, \d+)\)", first)
            t = re.search(r"gpu__time_duration.sum\s+(\S+)\s+([\d.,]+)", block)
            d = re.search(r"dram__bytes_read.sum\s+(\S+)\s+([\d.,]+)", block)
            us = to_us(t.group(1), t.group(2)) if t else 0.0
            total += us
            print(f"  {name[:34]:34s} {(targs.group(1) if targs else '')[:36]:36s} grid {grid.group(1):14s} "
                  f"{us:9.2f} us  dram {d.group(2) + ' ' + d.group(1) if d else '-'}")
        print(f"  sum {total:.1f} us")


if __name__ == "__main__":
    main(sys.argv[1:])
