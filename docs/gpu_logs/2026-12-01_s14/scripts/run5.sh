#!/usr/bin/env bash
# session 14, call 5: one token on the bulk decode kernel (direct routing) stages one row per
# M-block, so K is split only for grid fill (config.h kDecodeMaxK1): llama4-scout / deepseek-v3
# GEMM1 (K = 5120 / 7168) lose their split (memset, partial sums, act_finish), mixtral-8x7b GEMM2
# 4 -> 2 splits. The decode / one-token / selection tests first; then M = 1 rows of every scheme,
# qmoe against qmoe_base (HEAD 070776b), alternating twice; then the whole suite, C ABI, Python.
B=build-gpu-carry; W=$OUT/r5; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
xz -dc $B/qmoe_base.xz > $B/qmoe_base && chmod +x $B/qmoe_base; cp $B/qmoe $B/qmoe_new
timeout 120 $B/test_cuda --gtest_brief=1 --gtest_filter='CudaDecode*:DecodeFormats*:CudaSm90.OneToken*:Select*' > $W/test_decode.log 2>&1; echo "test decode rc $? $(el)"; tail -2 $W/test_decode.log; grep -E "^\[  FAILED" $W/test_decode.log | head -20; grep -A5 "Failure" $W/test_decode.log | head -30
for rep in 1 2; do
  for v in base new; do
    timeout 100 $B/qmoe_$v bench --backend cuda --shape all --m 1 --scheme bf16,fp8,int4,nvfp4a16,mxfp4,nvfp4,w4a8-fp8,w8a8-int8 --json $W/${v}_$rep.json > $W/${v}_$rep.md 2>$W/${v}_$rep.err; echo "$v $rep rc $? $(el)"
  done
done
timeout 300 $B/test_cuda --gtest_brief=1 > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log; grep -E "^\[  FAILED" $W/test.log | head -20
OUT=$W QMOE_GPU_PHASES="capi python" timeout 150 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "capi/python rc $? $(el)"; grep -E "passed|failed|PASSED|FAILED" $W/gpu_tests.log | tail -4
cd $OUT && tar czf r5.tgz r5
