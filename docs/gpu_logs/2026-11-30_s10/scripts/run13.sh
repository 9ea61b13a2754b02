#!/usr/bin/env bash
# session 10, call 13 (for the next session): ncu of the streaming kernel forced on rows where it
# trails the decode kernel (qwen3-30b-a3b M = 64 fp8, deepseek-v3 M = 64 bf16), and of the decode
# kernel on the same rows.
B=build-gpu-carry; W=$OUT/r13; mkdir -p $W
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
NCU="ncu --clock-control none -c 6 --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy"
for c in "qwen3-30b-a3b 64 fp8" "deepseek-v3 64 bf16"; do
  set -- $c
  QMOE_CUDA_STREAM=1 QMOE_CUDA_WGMMA_MIN_ROWS=1 timeout 90 $NCU -k regex:sm90_stream $B/qmoe bench --backend cuda --shape $1 --m $2 --scheme $3 --iters 1 --warmup 0 --settle-ms 0 > $W/ncu_stream_$1_$2_$3.txt 2>&1; echo "stream $c rc $? $(el)"
  timeout 90 $NCU -k regex:decode90 $B/qmoe bench --backend cuda --shape $1 --m $2 --scheme $3 --iters 1 --warmup 0 --settle-ms 0 > $W/ncu_dec_$1_$2_$3.txt 2>&1; echo "dec $c rc $? $(el)"
done
cd $OUT && tar czf r13.tgz r13
