#!/usr/bin/env bash
# session 15, call 3: the top-k sum in GEMM2's epilogue (both GEMMs on the bulk decode kernel: no
# reduce launch). The decode suites with the new bit-identity test first, then the decode rows of
# every scheme (M = 1 / 16 / 64) A/B against qmoe_base (HEAD b58dd9e), alternating twice; then the
# whole CUDA suite, C ABI and Python.
B=build-gpu-carry; W=$OUT/r3; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
xz -dc $B/qmoe_base.xz > $B/qmoe_base && chmod +x $B/qmoe_base; cp $B/qmoe $B/qmoe_new
timeout 150 $B/test_cuda --gtest_brief=1 --gtest_filter='CudaDecode*:DecodeFormats*:CudaSm90.OneToken*:Select*:CudaMoeEdges*' > $W/test_decode.log 2>&1; echo "test decode rc $? $(el)"; tail -2 $W/test_decode.log; grep -E "^\[  FAILED" $W/test_decode.log | head -20; grep -B2 -A8 "Failure" $W/test_decode.log | head -60
for rep in 1 2; do
  for v in base new; do
    timeout 120 $B/qmoe_$v bench --backend cuda --shape all --m 1,16,64 --scheme int4,mxfp4,nvfp4a16,nvfp4,w4a8-fp8,w8a8-int8,bf16,fp8 --json $W/${v}_$rep.json > $W/${v}_$rep.md 2>$W/${v}_$rep.err; echo "$v $rep rc $? $(el)"
  done
done
timeout 200 $B/test_cuda --gtest_brief=1 > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log; grep -E "^\[  FAILED" $W/test.log | head -20
OUT=$W QMOE_GPU_PHASES="capi python" timeout 60 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "capi/python rc $? $(el)"; grep -E "passed|failed|PASSED|FAILED" $W/gpu_tests.log | tail -4
cd $OUT && tar czf r3.tgz r3
