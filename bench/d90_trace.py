#!/usr/bin/env python3
"""Summary of the bulk decode kernel's per-block timeline (a build with -DQMOE_D90_TRACE, run as
QMOE_D90_TRACE_FILE=FILE qmoe bench ...; moe_decode.cu QMOE_D90_T). Per bench row and GEMM: the
blocks' first entry and last finish (us from the row's first entry, so GEMM2 reads against GEMM1),
and per-block phase medians / p10 / p90: entry -> consumers past pdl_wait -> first rows staged ->
first weights there -> item 0's atoms -> item 0's reduction + epilogue -> each later item.
Usage: bench/d90_trace.py FILE..."""
import statistics as st
import sys

# fields of a record line: block, then the kernel's ten (moe_decode.cu): entry, pdl, rows, data,
# atoms0, epi0, last, smid | items << 16, issue0, issueN
ENTRY, PDL, ROWS, DATA, ATOMS0, EPI0, LAST, SMID, ISSUE0, ISSUEN = range(1, 11)


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))] if v else 0


def report(head, recs, t0):
    work = [r for r in recs if r[SMID] >> 16 and r[LAST]]
    if not work:
        print(f"  {head}: no working blocks")
        return
    items = [r[SMID] >> 16 for r in work]
    us = lambda a, b: (b - a) / 1e3
    print(f"  {head}: {len(work)} working blocks of {len(recs)}, items per block {min(items)}-{max(items)}, "
          f"first entry {us(t0, min(r[ENTRY] for r in work)):.1f} us, last done {us(t0, max(r[LAST] for r in work)):.1f} us")
    d = {
        "entry": [us(t0, r[ENTRY]) for r in work],
        "entry->pdl": [us(r[ENTRY], r[PDL]) for r in work],
        "pdl->rows": [us(r[PDL], r[ROWS]) for r in work if r[ROWS]],
        "issue0->data": [us(r[ISSUE0], r[DATA]) for r in work if r[DATA] and r[ISSUE0]],
        "rows->data": [us(r[ROWS], r[DATA]) for r in work if r[DATA] and r[ROWS]],
        "item0 atoms": [us(r[DATA], r[ATOMS0]) for r in work if r[ATOMS0] and r[DATA]],
        "item0 red+epi": [us(r[ATOMS0], r[EPI0]) for r in work if r[EPI0] and r[ATOMS0]],
        "per later item": [us(r[EPI0], r[LAST]) / ((r[SMID] >> 16) - 1) for r in work if (r[SMID] >> 16) > 1],
        "block": [us(r[ENTRY], r[LAST]) for r in work],
        "finish": [us(t0, r[LAST]) for r in work],
    }
    for name, v in d.items():
        if v:
            print(f"    {name:15s} median {st.median(v):7.2f} us  p10 {pct(v, 0.1):7.2f}  p90 {pct(v, 0.9):7.2f}")


def main(paths):
    if not paths:
        sys.exit(__doc__)
    for path in paths:
        print(f"## {path}")
        row, gemms = None, []

        def flush():
            if row is None or not gemms:
                return
            print(row)
            t0 = min(r[ENTRY] for _, rs in gemms for r in rs if r[ENTRY])
            for head, rs in gemms:
                report(head, rs, t0)
            print()

        for line in open(path):
            if line.startswith("# row"):
                flush()
                row, gemms = line[2:].strip(), []
            elif line.startswith("# stage"):
                gemms.append((line[2:].strip(), []))
            elif line.strip() and gemms:
                gemms[-1][1].append([int(x) for x in line.split()])
        flush()


if __name__ == "__main__":
    main(sys.argv[1:])
