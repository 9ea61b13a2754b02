#!/usr/bin/env bash
# NOT RUN (no device came for it). session 51, call 3: run2.sh's pack, the GPU suite alone (device time left after failed starts: 343 s)
source scripts/gpu_run_lib.sh
gpu_run_begin build-gpu-carry r3
OUT=$W QMOE_GPU_PHASES="info tests capi python" timeout 215 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "suite rc $? $(el)"
grep -E "FAILED|passed|failed|rc " $W/gpu_tests.log | tail -8
pack
