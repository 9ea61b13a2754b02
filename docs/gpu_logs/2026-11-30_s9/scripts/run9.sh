#!/usr/bin/env bash
# session 9, call 9: the Hopper tests at e3708b1 (the add_case refactor of their scheme lists).
B=build-gpu-carry; W=$OUT/r9; mkdir -p $W
timeout 60 $B/test_cuda --gtest_filter='CudaSm90*:Select*' --gtest_brief=1 > $W/test.log 2>&1; echo "tests rc $?"; tail -3 $W/test.log
cd $OUT && tar czf r9.tgz r9
