#!/usr/bin/env bash
# session 22, call 4: CudaSm90.WideEpilogueStoresMatchNarrow with the tile kernel forced (r3 ran it
# at M = 60 top-1, where mma.sync runs: its precondition failed before it compared anything), then
# the CudaSm90 suite.
B=build-gpu-carry; W=$OUT/r4; mkdir -p $W
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
timeout 90 $B/test_cuda --gtest_brief=1 --gtest_filter='CudaSm90.WideEpilogue*' > $W/test_first.log 2>&1; echo "wide-store test rc $? $(el)"; tail -3 $W/test_first.log; grep -B2 -A8 "Failure" $W/test_first.log | head -30
timeout 120 $B/test_cuda --gtest_brief=1 --gtest_filter='CudaSm90.*' > $W/test_sm90.log 2>&1; echo "CudaSm90 rc $? $(el)"; tail -3 $W/test_sm90.log; grep -B2 -A8 "Failure" $W/test_sm90.log | head -30
cd $OUT && tar czf r4.tgz r4
