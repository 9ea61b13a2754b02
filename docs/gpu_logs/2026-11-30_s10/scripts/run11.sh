#!/usr/bin/env bash
# session 10, call 11: one token without align (direct routing on the bulk decode kernel): full
# CUDA tests, then M = 1 rows A/B (QMOE_CUDA_DIRECT=0 / default) for every scheme.
B=build-gpu-carry; W=$OUT/r11; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
QMOE_CUDA_SYNC_CHECK=1 timeout 60 $B/test_cuda --gtest_filter='CudaSm90.OneToken*' > $W/test_direct.log 2>&1; echo "direct test rc $? $(el)"; grep -E "OK \]|FAILED|Failure" $W/test_direct.log | head
timeout 250 $B/test_cuda --gtest_brief=1 > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log; grep -E "FAILED|Failure" $W/test.log | head
S="bf16,fp8,int4,nvfp4a16,mxfp4,nvfp4,w4a8-fp8,w8a8-int8"
for rep in 1 2; do
  QMOE_CUDA_DIRECT=0 timeout 60 $B/qmoe bench --backend cuda --shape all --m 1 --scheme $S --json $W/m1_align_$rep.json > $W/m1_align_$rep.md 2>&1
  timeout 60 $B/qmoe bench --backend cuda --shape all --m 1 --scheme $S --json $W/m1_direct_$rep.json > $W/m1_direct_$rep.md 2>&1
done; echo "m1 $(el)"
OUT=$W QMOE_GPU_PHASES="capi python" timeout 100 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "capi/python rc $? $(el)"; grep -E "passed|failed|PASSED|FAILED" $W/gpu_tests.log | tail -4
cd $OUT && tar czf r11.tgz r11
