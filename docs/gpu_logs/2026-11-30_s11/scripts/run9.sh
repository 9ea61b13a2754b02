#!/usr/bin/env bash
# session 11, call 9: two CTAs per SM for 64-row token tiles only where they accumulate straight
# into acc (channel scales, fp4 units): the wq tests; M = 1024 rows at 32 rows per expert; fp4 on
# the wq kernel forced at 8 / 16 rows per expert (QMOE_CUDA_WGMMA_MIN_ROWS=5) against the default.
B=build-gpu-carry; W=$OUT/r9; mkdir -p $W
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
timeout 100 $B/test_cuda --gtest_brief=1 --gtest_filter='CudaSm90.QuantizedWeightTokenTiles:CudaSm90.PrefillPath*' > $W/test.log 2>&1; echo "tests rc $? $(el)"; tail -3 $W/test.log
Q="timeout 100 $B/qmoe bench --backend cuda"
$Q --shape deepseek-v3,gpt-oss-120b --m 1024 --scheme int4,w4a8-fp8,nvfp4a16,mxfp4,nvfp4 --json $W/m1024.json > $W/m1024.md 2>&1; echo "m1024 rc $? $(el)"
$Q --shape all --m 64,256 --scheme nvfp4a16,mxfp4,nvfp4 --json $W/fp4_def.json > $W/fp4_def.md 2>&1; echo "fp4 def rc $? $(el)"
QMOE_CUDA_WGMMA_MIN_ROWS=5 $Q --shape all --m 64,256 --scheme nvfp4a16,mxfp4,nvfp4 --json $W/fp4_min5.json > $W/fp4_min5.md 2>&1; echo "fp4 min5 rc $? $(el)"
cd $OUT && tar czf r9.tgz r9
