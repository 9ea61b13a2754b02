#!/usr/bin/env bash
# session 31, call 1: the top-k sum fused into GEMM2 on the bulk decode kernel (GemmParams::fin_count):
# the whole CUDA suite; A/B fused vs QMOE_CUDA_FUSED_SUM=0 (same build) at M = 1 / 16 of bf16 / fp8 /
# int4 / MXFP4 on every shape, two alternations, and the committed build (qmoe_base) once; then the
# items per block of one-token layers (QMOE_CUDA_DECODE90_TILES) on qwen3-30b-a3b / llama4-scout.
B=build-gpu-carry; W=$OUT/r1; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
timeout 230 $B/test_cuda --gtest_brief=1 > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log; grep -E "^\[  FAILED" $W/test.log | head -20; grep -B2 -A8 "Failure" $W/test.log | head -30
for rep in 1 2; do for v in off new; do
  if [ $v = off ]; then export QMOE_CUDA_FUSED_SUM=0; else unset QMOE_CUDA_FUSED_SUM; fi
  timeout 45 $B/qmoe bench --backend cuda --shape all --m 1,16 --scheme bf16,fp8,int4,mxfp4 --json $W/${v}_$rep.json > $W/${v}_$rep.md 2>$W/${v}_$rep.err; echo "$v rep $rep rc $? $(el)"
done; done
unset QMOE_CUDA_FUSED_SUM
timeout 45 $B/qmoe_base bench --backend cuda --shape all --m 1,16 --scheme bf16,fp8,int4,mxfp4 --json $W/base_1.json > $W/base_1.md 2>$W/base_1.err; echo "base rc $? $(el)"
python3 bench/compare_rows.py "$W/off_*.json" "$W/new_*.json" > $W/compare.txt 2>&1; grep -v '^|---' $W/compare.txt | cut -c1-110
python3 bench/compare_rows.py "$W/base_1.json" "$W/off_*.json" > $W/compare_base_off.txt 2>&1; tail -4 $W/compare_base_off.txt | cut -c1-110
for t in 0 2 3 4; do
  if [ $t = 0 ]; then unset QMOE_CUDA_DECODE90_TILES; else export QMOE_CUDA_DECODE90_TILES=$t; fi
  for sh in qwen3-30b-a3b llama4-scout; do
    timeout 30 $B/qmoe bench --backend cuda --shape $sh --m 1 --scheme int4,fp8,mxfp4 --json $W/tiles${t}_$sh.json > $W/tiles${t}_$sh.md 2>$W/tiles${t}_$sh.err; echo "tiles $t $sh rc $? $(el)"
  done
done
unset QMOE_CUDA_DECODE90_TILES
for f in $W/tiles*_*.json; do python3 -c "
import json,sys; d=json.load(open('$f')); rows=d['rows'] if isinstance(d,dict) else d
print('$f'.split('/')[-1], ' '.join(f\"{r['scheme']}:{r['us']:.1f}\" for r in rows))"; done
cd $OUT && tar czf r1.tgz r1
