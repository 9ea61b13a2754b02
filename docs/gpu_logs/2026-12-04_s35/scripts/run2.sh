#!/usr/bin/env bash
# session 35, call 2: HEAD (745e299 + docs; the CPU fused streams' change, no CUDA change) on the H200:
# the whole CUDA suite, the C ABI and the Python phases of scripts/gpu_tests.sh.
B=build-gpu-carry; W=$OUT/r2; mkdir -p $W
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
OUT=$W QMOE_GPU_PHASES="info tests capi python" timeout 540 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "gpu_tests rc $? $(el)"
grep -E "PASSED|FAILED|passed|failed|SKIPPED|rc " $W/gpu_tests.log | tail -12
cd $OUT && tar czf r2.tgz r2
