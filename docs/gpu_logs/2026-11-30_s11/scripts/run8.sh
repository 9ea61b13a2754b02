#!/usr/bin/env bash
# session 11, call 8: the wq kernel's 64-row token tiles at two CTAs per SM too (group-scale
# variants spill 72-88 bytes to the stack at 104 registers): its tests, and the rows that take it
# (32 rows per expert: deepseek-v3 / gpt-oss-120b M = 1024) against r7.
B=build-gpu-carry; W=$OUT/r8; mkdir -p $W
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
timeout 100 $B/test_cuda --gtest_brief=1 --gtest_filter='CudaSm90.QuantizedWeightTokenTiles:CudaSm90.PrefillPath*:DecodeFormats*' > $W/test.log 2>&1; echo "tests rc $? $(el)"; tail -3 $W/test.log
timeout 100 $B/qmoe bench --backend cuda --shape deepseek-v3,gpt-oss-120b --m 1024 --scheme int4,w4a8-fp8,nvfp4a16,mxfp4,nvfp4 --json $W/tn64.json > $W/tn64.md 2>&1; echo "bench rc $? $(el)"
cd $OUT && tar czf r8.tgz r8
