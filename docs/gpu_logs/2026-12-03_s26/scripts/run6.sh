#!/usr/bin/env bash
# session 26, call 6: the switch tests after their refactor (shared sweep), and the Hopper suites
B=build-gpu-carry; W=$OUT/r6; mkdir -p $W
timeout 200 $B/test_cuda --gtest_brief=1 --gtest_filter='CudaSm90.*:SelectSm90.*' > $W/test.log 2>&1; echo "rc $?"; tail -3 $W/test.log; grep -B2 -A8 "Failure" $W/test.log | head -30
cd $OUT && tar czf r6.tgz r6
