#!/usr/bin/env python3
"""Where one kernel's warps stall, from Nsight Compute's SASS source page as CSV, e.g. (GPU machine)
  ncu --clock-control none -k 'regex:moe_decode90' -c 1 --section SourceCounters --section WarpStateStats \\
      --page source --print-source sass --csv \\
      qmoe bench --backend cuda --shape qwen3-30b-a3b --m 16 --scheme int4 --iters 1 --warmup 0 --settle-ms 0 > s.csv
(plain or .xz). Prints the stall samples per opcode, then the `--top` SASS lines with the most
samples, each with its index, its three largest stall reasons, and for a branch that closes an
mbarrier wait loop the barrier's shared-memory operand (the SYNCS ... TRYWAIT line before it), so
that waits on different barriers can be told apart (docs/perf.md, thirty-first session).
Usage: bench/ncu_sass_hot.py FILE [--top N]"""
import collections
import csv
import io
import lzma
import re
import sys


def read_rows(path):
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt", errors="replace") as f:
        text = f.read()
    start = text.find('"Address","Source"')
    if start < 0:
        sys.exit(f"{path}: no SASS source table (run ncu with --page source --print-source sass --csv)")
    rows = list(csv.reader(io.StringIO(text[start:])))
    head = rows[0]
    return head, [r for r in rows[1:] if len(r) == len(head)]


def opcode(src):
    s = re.sub(r"^@!?U?P\w+\s+", "", src.strip())
    return s.split()[0] if s else "?"


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    top = 30
    if "--top" in argv:
        i = argv.index("--top")
        top = int(argv[i + 1])
        del argv[i:i + 2]
    head, rows = read_rows(argv[0])
    col = {h: i for i, h in enumerate(head)}
    samples_col = col.get("Warp Stall Sampling (All Samples)")
    if samples_col is None:
        sys.exit("no 'Warp Stall Sampling (All Samples)' column (add --section SourceCounters)")
    reasons = [h for h in head if h.startswith("stall_") and "Not Issued" not in h]
    samples = [int(r[samples_col] or 0) for r in rows]
    total = sum(samples) or 1
    print(f"{len(rows)} SASS lines, {total} stall samples")
    per_op = collections.Counter()
    for r, s in zip(rows, samples):
        per_op[opcode(r[1])] += s
    for op, s in per_op.most_common(12):
        print(f"  {op:28s} {s:7d} {100.0 * s / total:5.1f}%")
    print(f"top {top} lines:")
    for k in sorted(sorted(range(len(rows)), key=lambda k: -samples[k])[:top]):
        r = rows[k]
        why = sorted(((int(r[col[c]] or 0), c[6:]) for c in reasons), reverse=True)[:3]
        note = ""
        if opcode(r[1]) == "BRA" and k > 0:
            for j in range(k - 1, max(-1, k - 6), -1):
                m = re.search(r"TRYWAIT\s+\S+,\s*(\[[^\]]*\])", rows[j][1])
                if m:
                    note = f"  (waits on {m.group(1)})"
                    break
        reason = " ".join(f"{n}:{v}" for v, n in why if v)
        print(f"  {k:6d} {samples[k]:6d} {100.0 * samples[k] / total:5.1f}%  {r[1].strip()[:64]}  {reason}{note}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
