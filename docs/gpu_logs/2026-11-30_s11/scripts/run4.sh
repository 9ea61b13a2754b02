#!/usr/bin/env bash
# session 11, call 4: the quantized-weight wgmma kernel's 32 / 64-row token tiles, x quantized once
# (h gather fixed), full CUDA tests; A/B benches: the default rule, wq forced at 5+ rows per expert
# (QMOE_CUDA_WGMMA_MIN_ROWS=5) with its tile by rule or 64, the tile forced to 128 / 64 at M = 1024,
# x quantized per slot (QMOE_CUDA_QUANT_ONCE=0) against once.
B=build-gpu-carry; W=$OUT/r4; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
timeout 240 $B/test_cuda --gtest_brief=1 > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log; grep -E "^\[  FAILED" $W/test.log | head -20
Q="timeout 80 $B/qmoe bench --backend cuda --shape all"
S4="int4,nvfp4a16,mxfp4,w4a8-fp8,nvfp4"
$Q --m 64,256,1024 --scheme $S4 --json $W/wq_def.json > $W/wq_def.md 2>&1; echo "def rc $? $(el)"
QMOE_CUDA_WGMMA_MIN_ROWS=5 $Q --m 64,256 --scheme $S4 --json $W/wq_min5.json > $W/wq_min5.md 2>&1; echo "min5 rc $? $(el)"
QMOE_CUDA_WGMMA_MIN_ROWS=5 QMOE_CUDA_WQ_TN=64 $Q --m 64,256 --scheme $S4 --json $W/wq_min5_64.json > $W/wq_min5_64.md 2>&1; echo "min5_64 rc $? $(el)"
QMOE_CUDA_WQ_TN=128 $Q --m 1024 --scheme $S4 --json $W/wq_1024_128.json > $W/wq_1024_128.md 2>&1; echo "1024_128 rc $? $(el)"
QMOE_CUDA_WQ_TN=64 $Q --m 1024 --scheme $S4 --json $W/wq_1024_64.json > $W/wq_1024_64.md 2>&1; echo "1024_64 rc $? $(el)"
for rep in 1 2; do
  QMOE_CUDA_QUANT_ONCE=0 $Q --m 256,1024,4096 --scheme fp8 --json $W/q0_$rep.json > $W/q0_$rep.md 2>&1; echo "q0 rc $? $(el)"
  $Q --m 256,1024,4096 --scheme fp8 --json $W/q1_$rep.json > $W/q1_$rep.md 2>&1; echo "q1 rc $? $(el)"
done
cd $OUT && tar czf r4.tgz r4
