#!/usr/bin/env bash
# session 27, call 3 (same build as r2): ring depth under the balanced plan (QMOE_CUDA_DECODE90_STAGES
# 2 / 3 / 4: the deepest ring up to that many stages that still lets two blocks share an SM) on the
# bulk-decode rows of fp8 / int8 / bf16, alternating twice; then the 4-bit formats with
# QMOE_CUDA_DECODE90_BALANCE 0 / 1 (their plans should not change).
B=build-gpu-carry; W=$OUT/r3; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
Q=$B/qmoe
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.limit,temperature.gpu --format=csv > $W/gpu.txt 2>&1
for rep in 1 2; do
  for v in 2 3 4; do
    QMOE_CUDA_DECODE90_STAGES=$v timeout 80 $Q bench --backend cuda --shape all --m 16,64 --scheme fp8,int8,bf16 --json $W/s${v}_$rep.json > $W/s${v}_$rep.md 2>$W/s${v}_$rep.err; echo "s$v $rep rc $? $(el)"
  done
done
python3 bench/compare_rows.py "$W/s2_*.json" "$W/s3_*.json" > $W/compare23.txt 2>&1; grep -v '^|---' $W/compare23.txt | cut -c1-110
python3 bench/compare_rows.py "$W/s2_*.json" "$W/s4_*.json" > $W/compare24.txt 2>&1; grep -v '^|---' $W/compare24.txt | cut -c1-110
for rep in 1 2; do
  for v in 0 1; do
    QMOE_CUDA_DECODE90_BALANCE=$v timeout 60 $Q bench --backend cuda --shape qwen3-30b-a3b,gpt-oss-120b,llama4-scout --m 1,16,64 --scheme int4,mxfp4,nvfp4a16 --json $W/f${v}_$rep.json > $W/f${v}_$rep.md 2>$W/f${v}_$rep.err; echo "f$v $rep rc $? $(el)"
  done
done
python3 bench/compare_rows.py "$W/f0_*.json" "$W/f1_*.json" > $W/comparef.txt 2>&1; grep -v '^|---' $W/comparef.txt | cut -c1-110
cd $OUT && tar czf r3.tgz r3
