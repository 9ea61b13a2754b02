#!/usr/bin/env bash
# session 15, call 6: h quantized in GEMM2's staging, now with each row's maximum taken by all
# eight consumer warps (four loads in flight per thread) instead of one warp per row (r5: one warp
# read mixtral-8x7b's 14336-column row alone, M = 1 0.89x). Fp8 decode rows A/B against qmoe_base
# (b58dd9e) alternating twice, then the whole CUDA suite.
B=build-gpu-carry; W=$OUT/r6; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
xz -dc $B/qmoe_base.xz > $B/qmoe_base && chmod +x $B/qmoe_base; cp $B/qmoe $B/qmoe_new
for rep in 1 2; do
  for v in base new; do
    timeout 60 $B/qmoe_$v bench --backend cuda --shape all --m 1,16,64 --scheme fp8 --json $W/${v}_$rep.json > $W/${v}_$rep.md 2>$W/${v}_$rep.err; echo "$v $rep rc $? $(el)"
  done
done
timeout 200 $B/test_cuda --gtest_brief=1 > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log; grep -E "^\[  FAILED" $W/test.log | head -20; grep -B2 -A8 "Failure" $W/test.log | head -30
cd $OUT && tar czf r6.tgz r6
