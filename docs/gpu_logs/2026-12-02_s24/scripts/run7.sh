#!/usr/bin/env bash
# session 24, call 7: where the fp8 128 x 128 tile's time goes (for the next session): ncu warp
# state / scheduler / compute / memory sections of GEMM1 of mixtral-8x7b fp8 M = 4096 (pairs off,
# the default), and the bf16 tile of the same layer for comparison.
B=build-gpu-carry; W=$OUT/r7; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
for sc in fp8 bf16; do
  timeout 120 ncu --clock-control none -k 'regex:sm90_moe' -c 1 --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section SpeedOfLight $B/qmoe bench --backend cuda --shape mixtral-8x7b --m 4096 --scheme $sc --iters 1 --warmup 0 --settle-ms 0 > $W/ncu_sections_${sc}_mixtral_4096.txt 2>&1; echo "ncu $sc rc $? $(el)"
  grep -E "Stall|Warp Cycles|Issued|Eligible|Throughput|Shared|Pipe|Busy|Duration" $W/ncu_sections_${sc}_mixtral_4096.txt | head -40 | cut -c1-130
done
cd $OUT && tar czf r7.tgz r7
