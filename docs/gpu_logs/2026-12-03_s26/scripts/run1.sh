#!/usr/bin/env bash
# session 26, call 1: fp8 on 128 x 256 tiles (Sm90Gemm::fp8_wide, QMOE_CUDA_FP8_WIDE). Tests of the
# Hopper paths first (stop on failure); A/B QMOE_CUDA_FP8_WIDE=0 / 1 on fp8 x every shape x
# M = 256 / 1024 / 4096, alternating twice; ncu of both on mixtral-8x7b fp8 M = 4096.
B=build-gpu-carry; W=$OUT/r1; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.limit,temperature.gpu --format=csv > $W/gpu.txt 2>&1
timeout 200 $B/test_cuda --gtest_brief=1 --gtest_filter='CudaSm90.*:CudaMoeEdges.*:SelectSm90.*' > $W/test_first.log 2>&1; rc=$?; echo "first tests rc $rc $(el)"; tail -3 $W/test_first.log; grep -B2 -A8 "Failure" $W/test_first.log | head -30
if [ $rc != 0 ]; then cd $OUT && tar czf r1.tgz r1; exit 1; fi
for rep in 1 2; do
  for v in 0 1; do
    QMOE_CUDA_FP8_WIDE=$v timeout 80 $B/qmoe bench --backend cuda --shape all --m 256,1024,4096 --scheme fp8 --json $W/w${v}_$rep.json > $W/w${v}_$rep.md 2>$W/w${v}_$rep.err; echo "w$v $rep rc $? $(el)"
  done
done
python3 bench/compare_rows.py "$W/w0_*.json" "$W/w1_*.json" > $W/compare.txt 2>&1; grep -v '^|---' $W/compare.txt | cut -c1-80
for v in 0 1; do
  QMOE_CUDA_FP8_WIDE=$v timeout 60 ncu --clock-control none -k 'regex:sm90_moe' -c 2 --section SpeedOfLight --section SchedulerStats --metrics gpu__time_duration.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_lsu.sum,lts__t_bytes.sum $B/qmoe bench --backend cuda --shape mixtral-8x7b --m 4096 --scheme fp8 --iters 1 --warmup 0 --settle-ms 0 > $W/ncu_fp8_mixtral_4096_w$v.txt 2>&1; echo "ncu w$v rc $? $(el)"
  grep -E "duration|tensor_op|lts__t_bytes|Issue Slots Busy|No Eligible" $W/ncu_fp8_mixtral_4096_w$v.txt | cut -c1-140 | head -10
done
# per-kernel times of fp8 rows that run below 80% of floor on the memory-bound kernels
for row in "qwen3-30b-a3b 16" "qwen3-30b-a3b 64" "gpt-oss-120b 64" "llama4-scout 16"; do
  set -- $row
  timeout 60 ncu --clock-control none -k 'regex:align_|sm90_|reduce_|act_|moe_|route_|quant|gather|decode' -c 12 --metrics gpu__time_duration.sum,dram__bytes_read.sum $B/qmoe bench --backend cuda --shape $1 --m $2 --scheme fp8 --iters 1 --warmup 0 --settle-ms 0 > $W/ncu_k_$1_$2.txt 2>&1; echo "ncu k $1 $2 rc $? $(el)"
  python3 bench/ncu_kernels.py $W/ncu_k_$1_$2.txt | cut -c1-130
done
cd $OUT && tar czf r1.tgz r1
