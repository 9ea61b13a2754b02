#!/usr/bin/env bash
# session 31, call 4 (HEAD ad8814f's build): ncu stall profile of the bulk decode kernel (int4 g128),
# GEMM1 and GEMM2 of one forward: qwen3-30b-a3b M = 16 and M = 1, llama4-scout M = 1. Warp states,
# scheduler, occupancy, and the SASS lines with the most stall samples.
B=build-gpu-carry; W=$OUT/r4; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
prof() {  # name shape m
  timeout 120 ncu --clock-control none -k 'regex:moe_decode90' -c 2 --section WarpStateStats --section SchedulerStats \
    --section Occupancy --section LaunchStats --section SpeedOfLight --section SourceCounters --section MemoryWorkloadAnalysis \
    $B/qmoe bench --backend cuda --shape $2 --m $3 --scheme int4 --iters 1 --warmup 0 --settle-ms 0 > $W/ncu_$1.txt 2>&1
  echo "ncu $1 rc $? $(el)"
}
prof qwen3_m16 qwen3-30b-a3b 16
prof qwen3_m1 qwen3-30b-a3b 1
prof llama4_m1 llama4-scout 1
for f in $W/ncu_*.txt; do echo "== $f"; grep -E "Duration|Issue Slots Busy|Issued Ipc|No Eligible|Active Warps Per Scheduler|Eligible Warps|Warp Cycles Per Issued|Stall|Memory Throughput|DRAM Throughput|Achieved Occupancy|Registers Per|Block Limit" $f | head -40; done
cd $OUT && tar czf r4.tgz r4
