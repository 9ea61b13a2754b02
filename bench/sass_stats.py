#!/usr/bin/env python3
"""Per-kernel SASS counts that cost no device time: instructions, global reductions (REDG) against
returning atomics (ATOMG), fences (MEMBAR), local loads / stores (LDL / STL: spills), and the loops
that hold MMA instructions (HMMA / HGMMA / QGMMA / IMMA / IGMMA), each with its length, MMA count and
local traffic. The forty-eighth session found with these counts why a change slowed decode rows that
never ran it: a GPU-scope fence anywhere in the bulk decode kernel made ptxas turn its K-split REDGs
into ATOMGs (docs/perf.md).

Usage: bench/sass_stats.py [--filter S] [--diff OTHER] INPUT
INPUT / OTHER: `cuobjdump --dump-sass` text, or an object / executable (then cuobjdump from $CUOBJDUMP,
else PATH, runs on it; PyPI's triton wheel carries one under triton/backends/nvidia/bin). --filter
keeps kernels whose name holds S. --diff prints the kernels whose counts differ between OTHER and INPUT
(names matched with their anonymous-namespace hashes removed)."""
import argparse
import os
import re
import shutil
import subprocess
import sys

MMA = re.compile(r"\b(HMMA|HGMMA|QGMMA|IMMA|IGMMA)\b")
ADDR = re.compile(r"^\s+/\*([0-9a-f]{4,6})\*/\s+(.*?)\s*;")
BACK = re.compile(r"\bBRA\b.*?(0x[0-9a-f]+)")
HASH = re.compile(r"_GLOBAL__N__[0-9a-f]+_\d+_\w+?_cu_[0-9a-f]+|_INTERNAL_[0-9a-f]+_\d+_\w+?_cu_[0-9a-f]+")


def sass_text(path):
    with open(path, "rb") as f:
        head = f.read(4)
    if head != b"\x7fELF":
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    tool = os.environ.get("CUOBJDUMP") or shutil.which("cuobjdump")
    if not tool:
        sys.exit(f"{path} is a binary and no cuobjdump was found (set CUOBJDUMP)")
    return subprocess.run([tool, "--dump-sass", path], check=True, capture_output=True, text=True).stdout


def kernels(text):
    """name -> [(address, instruction text)] per function of the dump."""
    out = {}
    for part in re.split(r"\n\s+Function : ", text)[1:]:
        lines = part.split("\n")
        name = HASH.sub("", lines[0].strip())
        out[name] = [(int(m.group(1), 16), m.group(2)) for m in map(ADDR.match, lines[1:]) if m]
    return out


def opcode(ins):
    words = ins.split()
    return words[1] if words and words[0].startswith("@") and len(words) > 1 else (words[0] if words else "")


def stats(ins):
    ops = [opcode(t) for _, t in ins]
    count = lambda p: sum(o.startswith(p) for o in ops)
    loops = []
    for addr, t in ins:
        m = BACK.search(t)
        if not m or int(m.group(1), 16) >= addr:
            continue
        lo = int(m.group(1), 16)
        body = [x for x in ins if lo <= x[0] <= addr]
        mma = sum(bool(MMA.search(x[1])) for x in body)
        if mma:
            local = sum(opcode(x[1]).startswith(("LDL", "STL")) for x in body)
            loops.append((lo, addr, len(body), mma, local))
    return {"instr": len(ins), "REDG": count("REDG"), "ATOMG": count("ATOMG"), "MEMBAR": count("MEMBAR"),
            "LDL": count("LDL"), "STL": count("STL"), "loops": sorted(loops)}


def line(s):
    loops = " ".join(f"[{lo:#x}-{hi:#x}: {n} instr, {m} mma, {loc} local]" for lo, hi, n, m, loc in s["loops"])
    return (f"instr {s['instr']} REDG {s['REDG']} ATOMG {s['ATOMG']} MEMBAR {s['MEMBAR']} "
            f"LDL {s['LDL']} STL {s['STL']}  loops {loops or '-'}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("input")
    ap.add_argument("--filter", default="")
    ap.add_argument("--diff", default=None)
    a = ap.parse_args()
    cur = {k: v for k, v in kernels(sass_text(a.input)).items() if a.filter in k}
    if a.diff is None:
        for k in sorted(cur):
            print(k)
            print("  " + line(stats(cur[k])))
        return
    old = {k: v for k, v in kernels(sass_text(a.diff)).items() if a.filter in k}
    for k in sorted(set(cur) | set(old)):
        so = stats(old[k]) if k in old else None
        sc = stats(cur[k]) if k in cur else None
        if so == sc:
            continue
        print(k)
        print("  old " + (line(so) if so else "(absent)"))
        print("  new " + (line(sc) if sc else "(absent)"))


if __name__ == "__main__":
    main()
