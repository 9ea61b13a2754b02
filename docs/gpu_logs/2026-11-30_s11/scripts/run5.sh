#!/usr/bin/env bash
# session 11, call 5: the wq kernel with 32 / 64-row token tiles from 12 rows per expert (int4 /
# int8 / W4A8), deeper rings for the small tiles, half tiles for an expert's last M-block; full CUDA
# tests; benches: the default rule, half tiles off (QMOE_CUDA_HALF_TAIL=0), fp4 forced onto the wq
# kernel at 16 / 32 rows, the 64-row tile at 64 rows.
B=build-gpu-carry; W=$OUT/r5; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
timeout 240 $B/test_cuda --gtest_brief=1 > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log; grep -E "^\[  FAILED" $W/test.log | head -20
Q="timeout 100 $B/qmoe bench --backend cuda --shape all"
S5="int4,w4a8-fp8,nvfp4a16,mxfp4,nvfp4"
$Q --m 64,256,1024,4096 --scheme $S5 --json $W/def.json > $W/def.md 2>&1; echo "def rc $? $(el)"
QMOE_CUDA_HALF_TAIL=0 $Q --m 256,1024,4096 --scheme int4,w4a8-fp8 --json $W/nohalf.json > $W/nohalf.md 2>&1; echo "nohalf rc $? $(el)"
QMOE_CUDA_WGMMA_MIN_ROWS=12 $Q --m 64,256 --scheme nvfp4a16,mxfp4,nvfp4 --json $W/fp4_min12.json > $W/fp4_min12.md 2>&1; echo "fp4_12 rc $? $(el)"
QMOE_CUDA_WGMMA_MIN_ROWS=17 $Q --m 1024 --scheme nvfp4a16,mxfp4,nvfp4 --json $W/fp4_min17.json > $W/fp4_min17.md 2>&1; echo "fp4_17 rc $? $(el)"
QMOE_CUDA_WQ_TN=64 $Q --m 1024 --scheme int4,w4a8-fp8 --json $W/tn64.json > $W/tn64.md 2>&1; echo "tn64 rc $? $(el)"
cd $OUT && tar czf r5.tgz r5
