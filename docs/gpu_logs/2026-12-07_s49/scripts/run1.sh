#!/usr/bin/env bash
# session 49, call 1 (pack of the decode epilogue change: the tokens' A rows read in the epilogue, not
# kept live through the K loops; fewer spills, the same arithmetic): (a) the whole GPU suite (tests,
# C ABI, Python); (b) the anchor bench (bf16, fp8, int4 at M = 1..4096), also the first pass since
# s48's revert of the fence (r2's decode-row losses); (c) issue 5's rows, in what is left of 585 s.
source scripts/gpu_run_lib.sh
gpu_run_begin build-gpu-carry r1
OUT=$W QMOE_GPU_PHASES="info tests capi python" timeout 250 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "suite rc $? $(el)"
grep -E "PASSED|FAILED|passed|failed|rc " $W/gpu_tests.log | tail -10
pack
timeout 180 $B/qmoe bench --backend cuda --shape all --m 1,16,64,256,1024,4096 --scheme bf16,fp8,int4 --json $W/anchors.json > $W/anchors.md 2>$W/anchors.err; echo "bench anchors rc $? $(el)"
pack
[ $(el) -lt 500 ] && timeout $(( 585 - $(el) )) $B/qmoe bench --backend cuda --shape all --m 1,16,4096 --scheme mxfp4,nvfp4a16,nvfp4,w4a8-fp8,w4a8-int8,w8a8-int8 --json $W/i5.json > $W/i5.md 2>$W/i5.err; echo "i5 rc $? $(el)"
pack
