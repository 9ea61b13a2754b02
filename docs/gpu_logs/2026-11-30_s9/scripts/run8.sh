#!/usr/bin/env bash
# session 9, call 8 (final): the gather's division keeps the sign of zero (copysign); the bit-for-bit
# gather test, full CUDA tests, C ABI and Python, the anchor benches at the final code.
B=build-gpu-carry; W=$OUT/r8; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
timeout 30 $B/test_cuda --gtest_filter='CudaSm90.Gather*' > $W/test_gather.log 2>&1; echo "gather test rc $? $(el)"; grep -E "OK \]|FAILED|Failure|code" $W/test_gather.log | head -12
timeout 100 $B/qmoe bench --backend cuda --shape all --m 1,16,64,256,1024,4096 --scheme bf16,fp8,int4 --json $W/bench_all.json > $W/bench_all.md 2>$W/bench_all.err; echo "bench_all rc $? $(el)"
timeout 100 $B/qmoe bench --backend cuda --shape all --m 1,16,64,256,1024,4096 --scheme nvfp4a16,mxfp4,nvfp4,w4a8-fp8,w8a8-int8 --json $W/b2_all.json > $W/b2_all.md 2>$W/b2_all.err; echo "b2 rc $? $(el)"
timeout 200 $B/test_cuda --gtest_brief=1 > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log
OUT=$W QMOE_GPU_PHASES="capi python" timeout 100 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "capi/python rc $? $(el)"; grep -E "passed|failed|PASSED|FAILED" $W/gpu_tests.log | tail -4
(dmesg 2>&1 | grep -i "xid\|nvrm" | tail -20) > $W/dmesg.txt
cd $OUT && tar czf r8.tgz r8
