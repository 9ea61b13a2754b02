#!/usr/bin/env bash
# session 27, call 1: balanced warp slabs / a third block per SM for the sm_90 bulk decode kernel
# (config.h dec90_balance, QMOE_CUDA_DECODE90_BALANCE 0 = old plan, 1 = new, 2 = slabs only).
# Decode tests first (stop on failure); A/B 0/1/2 alternating twice on the shapes whose plans change;
# ncu per kernel and stall sections of qwen3-30b-a3b fp8 M = 16.
B=build-gpu-carry; W=$OUT/r1; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
Q=$B/qmoe
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.limit,temperature.gpu --format=csv > $W/gpu.txt 2>&1
timeout 200 $B/test_cuda --gtest_brief=1 --gtest_filter='Select*:CudaDecode*:DecodeFormats/*' > $W/test_first.log 2>&1; rc=$?; echo "decode tests rc $rc $(el)"; tail -3 $W/test_first.log; grep -B2 -A8 "Failure" $W/test_first.log | head -30
if [ $rc != 0 ]; then cd $OUT && tar czf r1.tgz r1; exit 1; fi
for rep in 1 2; do
  for v in 0 1 2; do
    QMOE_CUDA_DECODE90_BALANCE=$v timeout 70 $Q bench --backend cuda --shape qwen3-30b-a3b,deepseek-v3,mixtral-8x7b --m 1,16,64 --scheme fp8,bf16,int8 --json $W/b${v}_$rep.json > $W/b${v}_$rep.md 2>$W/b${v}_$rep.err; echo "b$v $rep rc $? $(el)"
  done
done
python3 bench/compare_rows.py "$W/b0_*.json" "$W/b1_*.json" > $W/compare01.txt 2>&1; grep -v '^|---' $W/compare01.txt | cut -c1-110
python3 bench/compare_rows.py "$W/b0_*.json" "$W/b2_*.json" > $W/compare02.txt 2>&1; tail -3 $W/compare02.txt | cut -c1-110
timeout 40 ncu --clock-control none -k 'regex:align_|reduce_|act_|moe_|decode' -c 6 --metrics gpu__time_duration.sum,dram__bytes_read.sum $Q bench --backend cuda --shape qwen3-30b-a3b --m 16 --scheme fp8 --iters 1 --warmup 0 --settle-ms 0 > $W/ncu_k_qwen3_16.txt 2>&1; echo "ncu k rc $? $(el)"
python3 bench/ncu_kernels.py $W/ncu_k_qwen3_16.txt | cut -c1-130
timeout 60 ncu --clock-control none -k 'regex:decode90' -c 2 --section SchedulerStats --section WarpStateStats --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis $Q bench --backend cuda --shape qwen3-30b-a3b --m 16 --scheme fp8 --iters 1 --warmup 0 --settle-ms 0 > $W/ncu_full_qwen3_16.txt 2>&1; echo "ncu full rc $? $(el)"
grep -E "decode90_kernel|Issued Warp|No Eligible|Active Warps Per|Eligible Warps|Warp Cycles Per Issued|Achieved Occupancy|Block Limit|Registers Per|Memory Throughput|DRAM Throughput|Duration" $W/ncu_full_qwen3_16.txt | head -40
cd $OUT && tar czf r1.tgz r1
