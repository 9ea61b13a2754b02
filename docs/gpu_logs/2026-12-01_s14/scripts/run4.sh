#!/usr/bin/env bash
# session 14, call 4: GEMM2 on the Hopper path adds each slot's weighted row into its token's fp32
# row (Sm90Gemm::accum, red.global.add; "yacc") instead of writing slot rows for the top-k sum.
# The new test and the Hopper suites first; then A/B in one binary (QMOE_CUDA_YACC=0 / 1,
# alternating twice) on bf16 / fp8 / int4 at M = 256 / 1024 / 4096; then the whole suite, C ABI, Python.
B=build-gpu-carry; W=$OUT/r4; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
timeout 150 $B/test_cuda --gtest_brief=1 --gtest_filter='CudaSm90.Gemm2*:CudaSm90.Prefill*:CudaSm90.Stream*:CudaMoeEdges*' > $W/test_yacc.log 2>&1; echo "test yacc rc $? $(el)"; tail -2 $W/test_yacc.log; grep -E "^\[  FAILED" $W/test_yacc.log | head -20; grep -A5 "Failure" $W/test_yacc.log | head -30
for rep in 1 2; do
  for v in 0 1; do
    QMOE_CUDA_YACC=$v timeout 120 $B/qmoe bench --backend cuda --shape all --m 256,1024,4096 --scheme bf16,fp8,int4 --json $W/y${v}_$rep.json > $W/y${v}_$rep.md 2>$W/y${v}_$rep.err; echo "yacc $v $rep rc $? $(el)"
  done
done
timeout 300 $B/test_cuda --gtest_brief=1 > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log; grep -E "^\[  FAILED" $W/test.log | head -20
OUT=$W QMOE_GPU_PHASES="capi python" timeout 150 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "capi/python rc $? $(el)"; grep -E "passed|failed|PASSED|FAILED" $W/gpu_tests.log | tail -4
cd $OUT && tar czf r4.tgz r4
