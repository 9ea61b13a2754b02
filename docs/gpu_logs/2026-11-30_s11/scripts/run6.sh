#!/usr/bin/env bash
# session 11, call 6: the session's kernels at 95364f3 (+ the decode test's 16-row sweep moved to
# 5-11 rows): full CUDA tests, C ABI and Python on the GPU, the anchor rows of every scheme, and the
# wq kernel forced at 5+ rows per expert (QMOE_CUDA_WGMMA_MIN_ROWS=5) for int4 / W4A8 at M = 256.
B=build-gpu-carry; W=$OUT/r6; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
timeout 240 $B/test_cuda --gtest_brief=1 > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log; grep -E "^\[  FAILED" $W/test.log | head -20
OUT=$W QMOE_GPU_PHASES="capi python" timeout 120 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "capi/python rc $? $(el)"; grep -E "passed|failed|PASSED|FAILED" $W/gpu_tests.log | tail -4
Q="timeout 150 $B/qmoe bench --backend cuda --shape all"
$Q --m 1,16,64,256,1024,4096 --scheme bf16,fp8,int4 --json $W/bench_all.json > $W/bench_all.md 2>$W/bench_all.err; echo "all rc $? $(el)"
$Q --m 1,16,64,256,1024,4096 --scheme nvfp4a16,mxfp4,nvfp4,w4a8-fp8,w8a8-int8 --json $W/b2_all.json > $W/b2_all.md 2>$W/b2_all.err; echo "b2 rc $? $(el)"
QMOE_CUDA_WGMMA_MIN_ROWS=5 timeout 60 $B/qmoe bench --backend cuda --shape deepseek-v3,gpt-oss-120b --m 256 --scheme int4,w4a8-fp8 --json $W/min5.json > $W/min5.md 2>&1; echo "min5 rc $? $(el)"
timeout 60 $B/qmoe bench --backend cuda --shape deepseek-v3,gpt-oss-120b --m 256 --scheme int4,w4a8-fp8 --json $W/def256.json > $W/def256.md 2>&1; echo "def256 rc $? $(el)"
cd $OUT && tar czf r6.tgz r6
