#!/usr/bin/env bash
# session 31, call 3 (HEAD ad8814f's build, no code change): the bulk decode kernel's ring depth at
# one token. The trace of the thirtieth session had every GEMM1 block's whole first item requested
# at once and the second items only as ring slots freed; the plan keeps 2 stages (one 32-column item
# of qwen3-30b-a3b) where blocks walk few items. Variants by the existing switches:
# QMOE_CUDA_DECODE90_BALANCE=0 with QMOE_CUDA_DECODE90_STAGES=2 / 4 / 8 (the deepest ring that keeps
# two blocks per SM), against the default plan; M = 1 / 16 of int4 / MXFP4 / fp8 / bf16, every shape,
# two alternations.
B=build-gpu-carry; W=$OUT/r3; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
run() {  # name balance stages
  QMOE_CUDA_DECODE90_BALANCE=$2 QMOE_CUDA_DECODE90_STAGES=$3 timeout 45 $B/qmoe bench --backend cuda --shape all --m 1,16 \
    --scheme int4,mxfp4,fp8,bf16 --json $W/$1.json > $W/$1.md 2>$W/$1.err; echo "$1 rc $? $(el)"
}
for rep in 1 2; do
  run def_$rep 1 2; run b0s2_$rep 0 2; run b0s4_$rep 0 4; run b0s8_$rep 0 8
done
for v in b0s2 b0s4 b0s8; do
  python3 bench/compare_rows.py "$W/def_*.json" "$W/${v}_*.json" > $W/compare_$v.txt 2>&1
  echo "== default vs $v"; grep -v '^|---' $W/compare_$v.txt | cut -c1-80 | grep -E "\| 1 \||geomean"
  grep -E "\| 16 \|" $W/compare_$v.txt | awk -F'|' '{printf "%s M16 %s; ", $2, $7}'; echo
done
cd $OUT && tar czf r3.tgz r3
