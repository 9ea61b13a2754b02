#!/usr/bin/env bash
# session 13, call 7: validation of the final code (folded int4 group scales; the environment
# switches read through env_switch.h; the tests' ScopedEnv): the whole CUDA test suite, C ABI,
# Python, the anchor rows of every scheme, and the exact int4 path (QMOE_CUDA_WQ_FOLD=0) once more.
B=build-gpu-carry; W=$OUT/r7; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
timeout 300 $B/test_cuda --gtest_brief=1 > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log; grep -E "^\[  FAILED" $W/test.log | head -20; grep -A4 "Failure" $W/test.log | head -30
OUT=$W QMOE_GPU_PHASES="capi python" timeout 150 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "capi/python rc $? $(el)"; grep -E "passed|failed|PASSED|FAILED" $W/gpu_tests.log | tail -4
Q="timeout 150 $B/qmoe bench --backend cuda --shape all"
$Q --m 1,16,64,256,1024,4096 --scheme bf16,fp8,int4 --json $W/bench_all.json > $W/bench_all.md 2>$W/bench_all.err; echo "all rc $? $(el)"
$Q --m 1,16,64,256,1024,4096 --scheme nvfp4a16,mxfp4,nvfp4,w4a8-fp8,w8a8-int8 --json $W/b2_all.json > $W/b2_all.md 2>$W/b2_all.err; echo "b2 rc $? $(el)"
QMOE_CUDA_WQ_FOLD=0 $Q --m 256,1024,4096 --scheme int4 --json $W/exact.json > $W/exact.md 2>$W/exact.err; echo "exact rc $? $(el)"
cd $OUT && tar czf r7.tgz r7
