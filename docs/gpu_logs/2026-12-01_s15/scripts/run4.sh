#!/usr/bin/env bash
# session 15, call 4: the bulk decode kernel's K-group sums through mbarriers (s14's patch) and
# each item's epilogue rotated over the four warp pairs (ti & 3), so that warps 0-1 no longer do
# it for every item (r2's timeline: item reduction + epilogue 0.7-1.9 us of 2-7 us items).
# Decode suites, the decode rows A/B against qmoe_base (b58dd9e) alternating twice, the new kernel
# with a 4-stage ring once; then the whole CUDA suite, C ABI, Python.
B=build-gpu-carry; W=$OUT/r4; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
xz -dc $B/qmoe_base.xz > $B/qmoe_base && chmod +x $B/qmoe_base; cp $B/qmoe $B/qmoe_new
timeout 150 $B/test_cuda --gtest_brief=1 --gtest_filter='CudaDecode*:DecodeFormats*:CudaSm90.OneToken*:Select*:CudaMoeEdges*' > $W/test_decode.log 2>&1; echo "test decode rc $? $(el)"; tail -2 $W/test_decode.log; grep -E "^\[  FAILED" $W/test_decode.log | head -20; grep -B2 -A8 "Failure" $W/test_decode.log | head -40
R="--shape all --m 1,16,64 --scheme int4,mxfp4,nvfp4a16,w4a8-fp8,fp8,bf16"
for rep in 1 2; do
  for v in base new; do
    timeout 110 $B/qmoe_$v bench --backend cuda $R --json $W/${v}_$rep.json > $W/${v}_$rep.md 2>$W/${v}_$rep.err; echo "$v $rep rc $? $(el)"
  done
done
QMOE_CUDA_DECODE90_STAGES=4 timeout 110 $B/qmoe_new bench --backend cuda $R --json $W/new4_1.json > $W/new4_1.md 2>$W/new4_1.err; echo "new4 rc $? $(el)"
timeout 200 $B/test_cuda --gtest_brief=1 > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log; grep -E "^\[  FAILED" $W/test.log | head -20
OUT=$W QMOE_GPU_PHASES="capi python" timeout 60 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "capi/python rc $? $(el)"; grep -E "passed|failed|PASSED|FAILED" $W/gpu_tests.log | tail -4
cd $OUT && tar czf r4.tgz r4
