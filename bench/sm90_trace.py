#!/usr/bin/env python3
"""Summary of a per-CTA timeline of the Hopper GEMM kernel (a build with -DQMOE_SM90_TRACE, run with
QMOE_SM90_TRACE_FILE=FILE; sm90_moe_gemm.cu). Per launch: CTAs that did work, the kernel's span,
per-CTA phase medians (entry -> first stage's data, the k-loop, the epilogue), the share of the
span SMs spent inside working CTAs, and the gaps on an SM between one CTA's end and the next
CTA's entry.
Usage: bench/sm90_trace.py FILE..."""
import statistics as st
import sys


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))] if v else 0


def summarize(head, rows):
    work = [r for r in rows if r[2] and r[3] and r[4]]
    if not work:
        print(head, "no working CTAs")
        return
    t0 = min(r[1] for r in rows)
    t_end = max(r[4] for r in work)
    span = (t_end - t0) / 1e3
    pro = [(r[2] - r[1]) / 1e3 for r in work]
    loop = [(r[3] - r[2]) / 1e3 for r in work]
    epi = [(r[4] - r[3]) / 1e3 for r in work]
    dur = [(r[4] - r[1]) / 1e3 for r in work]
    by_sm = {}
    for r in work:
        by_sm.setdefault(r[5], []).append(r)
    busy = sum(sum((r[4] - r[1]) for r in v) for v in by_sm.values()) / 1e3
    gaps = []
    for v in by_sm.values():
        v.sort(key=lambda r: r[1])
        gaps += [(b[1] - a[4]) / 1e3 for a, b in zip(v, v[1:])]
    print(head.strip())
    print(f"  working CTAs {len(work)} of {len(rows)}, SMs {len(by_sm)}, span {span:.1f} us, "
          f"SM time in working CTAs {100 * busy / (span * len(by_sm)):.0f}%")
    for name, v in (("entry->data", pro), ("k-loop", loop), ("epilogue", epi), ("CTA", dur), ("gap", gaps)):
        print(f"  {name:12s} median {st.median(v) if v else 0:7.2f} us  p10 {pct(v, 0.1):7.2f}  p90 {pct(v, 0.9):7.2f}  "
              f"sum/SM {sum(v) / max(1, len(by_sm)):8.1f} us")


def main(paths):
    if not paths:
        sys.exit(__doc__)
    for path in paths:
        print(f"## {path}")
        head, rows = None, []
        for line in open(path):
            if line.startswith("#"):
                if head:
                    summarize(head, rows)
                head, rows = line, []
            elif line.strip():
                rows.append([int(x) for x in line.split()])
        if head:
            summarize(head, rows)


if __name__ == "__main__":
    main(sys.argv[1:])
