#!/usr/bin/env bash
# session 31, call 5 (HEAD ad8814f's build): the bulk decode kernel's warp-stall breakdown and the
# SASS lines' stall samples, int4 g128 GEMM1 of qwen3-30b-a3b M = 16 and llama4-scout M = 1.
B=build-gpu-carry; W=$OUT/r5; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
for c in "qwen3_m16 qwen3-30b-a3b 16" "llama4_m1 llama4-scout 1"; do
  set -- $c
  timeout 90 ncu --clock-control none -k 'regex:moe_decode90' -c 1 --section WarpStateStats --section SourceCounters --print-details all \
    $B/qmoe bench --backend cuda --shape $2 --m $3 --scheme int4 --iters 1 --warmup 0 --settle-ms 0 > $W/stalls_$1.txt 2>&1; echo "stalls $1 rc $? $(el)"
  timeout 90 ncu --clock-control none -k 'regex:moe_decode90' -c 1 --section SourceCounters --section WarpStateStats --page source --print-source sass --csv \
    $B/qmoe bench --backend cuda --shape $2 --m $3 --scheme int4 --iters 1 --warmup 0 --settle-ms 0 > $W/sass_$1.csv 2>&1; echo "sass $1 rc $? $(el)"
  grep -iE "stall|warp cycles" $W/stalls_$1.txt | head -40
done
ls -la $W; cd $W && xz -9 sass_*.csv; cd $OUT && tar czf r5.tgz r5
