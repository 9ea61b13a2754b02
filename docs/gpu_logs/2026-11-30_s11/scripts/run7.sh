#!/usr/bin/env bash
# session 11, call 7: the wq kernel's 32-row token tiles at two CTAs per SM (80 registers at launch,
# 24 / 104 after setmaxnreg, six 16 KiB stages each) and wq from 8 rows per expert (19428f4): full
# CUDA tests, C ABI and Python, the anchor rows of every scheme.
B=build-gpu-carry; W=$OUT/r7; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
Q="timeout 150 $B/qmoe bench --backend cuda --shape all"
$Q --m 64,256 --scheme int4,w4a8-fp8 --json $W/tn32.json > $W/tn32.md 2>&1; echo "tn32 rc $? $(el)"
timeout 240 $B/test_cuda --gtest_brief=1 > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log; grep -E "^\[  FAILED" $W/test.log | head -20
OUT=$W QMOE_GPU_PHASES="capi python" timeout 120 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "capi/python rc $? $(el)"; grep -E "passed|failed|PASSED|FAILED" $W/gpu_tests.log | tail -4
$Q --m 1,16,64,256,1024,4096 --scheme bf16,fp8,int4 --json $W/bench_all.json > $W/bench_all.md 2>$W/bench_all.err; echo "all rc $? $(el)"
$Q --m 1,16,64,256,1024,4096 --scheme nvfp4a16,mxfp4,nvfp4,w4a8-fp8,w8a8-int8 --json $W/b2_all.json > $W/b2_all.md 2>$W/b2_all.err; echo "b2 rc $? $(el)"
cd $OUT && tar czf r7.tgz r7
