#!/usr/bin/env bash
# session 15, call 5: fp8 GEMM2 (one scale pair for K) on the bulk decode kernel quantizes h while
# staging it, with act_prep's arithmetic, so no act_prep launch sits between the GEMMs (r2's
# timeline: deepseek-v3 fp8 M = 1, 8 us from GEMM1's end to GEMM2's first weights). The whole CUDA
# suite (new: CudaDecode.HQuantInGemm2MatchesActPrep, bit identity with the act_prep path), C ABI,
# Python; then fp8 decode rows A/B against qmoe_base (b58dd9e) alternating twice, and the 4-bit
# M = 1 / 16 rows once each (their kernels' shared-memory layout moved by 32-64 bytes).
B=build-gpu-carry; W=$OUT/r5; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
xz -dc $B/qmoe_base.xz > $B/qmoe_base && chmod +x $B/qmoe_base; cp $B/qmoe $B/qmoe_new
timeout 200 $B/test_cuda --gtest_brief=1 > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log; grep -E "^\[  FAILED" $W/test.log | head -20; grep -B2 -A8 "Failure" $W/test.log | head -40
OUT=$W QMOE_GPU_PHASES="capi python" timeout 60 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "capi/python rc $? $(el)"; grep -E "passed|failed|PASSED|FAILED" $W/gpu_tests.log | tail -4
for rep in 1 2; do
  for v in base new; do
    timeout 60 $B/qmoe_$v bench --backend cuda --shape all --m 1,16,64 --scheme fp8 --json $W/${v}_$rep.json > $W/${v}_$rep.md 2>$W/${v}_$rep.err; echo "$v $rep rc $? $(el)"
  done
done
for v in base new; do
  timeout 60 $B/qmoe_$v bench --backend cuda --shape all --m 1,16 --scheme int4,mxfp4,nvfp4a16 --json $W/q4_$v.json > $W/q4_$v.md 2>$W/q4_$v.err; echo "q4 $v rc $? $(el)"
done
cd $OUT && tar czf r5.tgz r5
