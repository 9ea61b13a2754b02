#!/usr/bin/env bash
# NOT RUN (no device came for it). session 51, call 4: run2.sh's pack, the tests this session's kernel changes touch (device time left
# after failed starts: 253 s): the wq kernel's token-column counts (LiveTokenColumns incl. W4A8 fp8 on
# QGMMA, W4A8Fp8OnQgmma, FoldedGroupScales) and the decode kernels (A rows in shared memory)
source scripts/gpu_run_lib.sh
gpu_run_begin build-gpu-carry r4
timeout 125 $B/test_cuda --gtest_filter='CudaSm90.LiveTokenColumns:CudaSm90.W4A8Fp8OnQgmma:*DecodeSweep*:CudaDecode.*:CudaSm90.FoldedGroupScales' > $W/tests.log 2>&1; echo "tests rc $? $(el)"
grep -E "^\[ +(OK|FAILED|PASSED|SKIPPED) " $W/tests.log | tail -40
pack
