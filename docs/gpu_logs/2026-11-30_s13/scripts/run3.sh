#!/usr/bin/env bash
# session 13, call 3: validation of the folded int4 group scales (fold only on 64- / 128-row token
# tiles; tests compare folded kernels with the rounding baseline): the whole CUDA test suite, C ABI,
# Python; int4 rows at every M (fold, the default) and the exact path again (QMOE_CUDA_WQ_FOLD=0).
B=build-gpu-carry; W=$OUT/r3; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
timeout 300 $B/test_cuda --gtest_brief=1 > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log; grep -E "^\[  FAILED" $W/test.log | head -20; grep -B3 -A3 "Failure" $W/test.log | head -40
OUT=$W QMOE_GPU_PHASES="capi python" timeout 150 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "capi/python rc $? $(el)"; grep -E "passed|failed|PASSED|FAILED" $W/gpu_tests.log | tail -4
timeout 90 $B/qmoe bench --backend cuda --shape all --m 1,16,64,256,1024,4096 --scheme int4 --json $W/int4.json > $W/int4.md 2>$W/int4.err; echo "int4 rc $? $(el)"
QMOE_CUDA_WQ_FOLD=0 timeout 90 $B/qmoe bench --backend cuda --shape all --m 256,1024,4096 --scheme int4 --json $W/exact.json > $W/exact.md 2>$W/exact.err; echo "exact rc $? $(el)"
timeout 90 $B/qmoe bench --backend cuda --shape all --m 256,1024,4096 --scheme int4 --json $W/int4_b.json > $W/int4_b.md 2>$W/int4_b.err; echo "int4_b rc $? $(el)"
cd $OUT && tar czf r3.tgz r3
