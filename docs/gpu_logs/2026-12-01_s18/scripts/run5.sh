#!/usr/bin/env bash
# session 18, call 5 (measurements only, qmoe_base of r4 = commit 8cb7c37's kernels): INT8 W8A8 at
# M = 1 / 16 on the streaming kernel (QMOE_CUDA_STREAM=1, NT 16) against the decode kernels, and at
# M = 1024 / 4096 with 64-row M-blocks throughout (QMOE_CUDA_WG64_MAX_ROWS=100000) against the rule;
# alternating twice.
B=build-gpu-carry; W=$OUT/r5; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
xz -dc $B/qmoe_base.xz > $B/qmoe_base && chmod +x $B/qmoe_base
Q=$B/qmoe_base
for rep in 1 2; do
  env QMOE_X=1 timeout 100 $Q bench --backend cuda --shape all --m 1,16 --scheme w8a8-int8 --json $W/dec_def_$rep.json > $W/dec_def_$rep.md 2>&1; echo "dec def $rep rc $? $(el)"
  env QMOE_CUDA_STREAM=1 QMOE_CUDA_STREAM_NT=16 timeout 100 $Q bench --backend cuda --shape all --m 1,16 --scheme w8a8-int8 --json $W/dec_st_$rep.json > $W/dec_st_$rep.md 2>&1; echo "dec st $rep rc $? $(el)"
  env QMOE_X=1 timeout 100 $Q bench --backend cuda --shape deepseek-v3,gpt-oss-120b,qwen3-30b-a3b --m 1024,4096 --scheme w8a8-int8 --json $W/pre_def_$rep.json > $W/pre_def_$rep.md 2>&1; echo "pre def $rep rc $? $(el)"
  env QMOE_CUDA_WG64_MAX_ROWS=100000 timeout 100 $Q bench --backend cuda --shape deepseek-v3,gpt-oss-120b,qwen3-30b-a3b --m 1024,4096 --scheme w8a8-int8 --json $W/pre_64_$rep.json > $W/pre_64_$rep.md 2>&1; echo "pre 64 $rep rc $? $(el)"
done
python3 bench/compare_rows.py "$W/dec_def_*.json" "$W/dec_st_*.json" stream16 2>&1 | grep -v '^|---' | cut -c1-150
python3 bench/compare_rows.py "$W/pre_def_*.json" "$W/pre_64_*.json" bm64 2>&1 | grep -v '^|---' | cut -c1-150
cd $OUT && tar czf r5.tgz r5
