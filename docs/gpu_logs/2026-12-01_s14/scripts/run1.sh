#!/usr/bin/env bash
# session 14, call 1: int4 codes on bf16 operands enter the sm_90 decode kernel biased (128 + u:
# one LOP3 per pair, no HSUB2; a ones-operand mma sums each token over the chunk, and the partial
# loses (128 + z) x that sum). Correctness first (the decode suites, the new one-signed test), then
# int4 / W4A8 decode rows A/B against the previous kernel (qmoe_base = HEAD 070776b), alternating
# twice; then the whole CUDA test suite, C ABI, Python.
B=build-gpu-carry; W=$OUT/r1; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
xz -dc $B/qmoe_base.xz > $B/qmoe_base && chmod +x $B/qmoe_base
timeout 120 $B/test_cuda --gtest_brief=1 --gtest_filter='CudaDecode*:DecodeFormats*:CudaSm90.OneToken*' > $W/test_decode.log 2>&1; echo "test decode rc $? $(el)"; tail -3 $W/test_decode.log; grep -E "^\[  FAILED" $W/test_decode.log | head -20; grep -A6 "Failure" $W/test_decode.log | head -40
for rep in 1 2; do
  for v in base new; do
    bin=$B/qmoe; [ $v = base ] && bin=$B/qmoe_base
    timeout 100 $bin bench --backend cuda --shape all --m 1,16,64 --scheme int4,w4a8-fp8,w4a8-int8 --json $W/${v}_$rep.json > $W/${v}_$rep.md 2>$W/${v}_$rep.err; echo "$v $rep rc $? $(el)"
  done
done
timeout 300 $B/test_cuda --gtest_brief=1 > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log; grep -E "^\[  FAILED" $W/test.log | head -20
OUT=$W QMOE_GPU_PHASES="capi python" timeout 150 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "capi/python rc $? $(el)"; grep -E "passed|failed|PASSED|FAILED" $W/gpu_tests.log | tail -4
cd $OUT && tar czf r1.tgz r1
