#!/usr/bin/env bash
# session 13, call 10: the review commit 082d151 (tolerances moved into tol_for, proj_folds(),
# round_act(); host and test code only): the Hopper, sweep, edge and decode tests on the H200.
B=build-gpu-carry; W=$OUT/r10; mkdir -p $W
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
timeout 200 $B/test_cuda --gtest_brief=1 --gtest_filter='CudaSm90*:AllSchemes/SchemeSweep*:CudaMoeEdges.*:DecodeFormats*:Select*' > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log; grep -E "^\[  FAILED" $W/test.log | head; grep -A4 "Failure" $W/test.log | head -20
cd $OUT && tar czf r10.tgz r10
