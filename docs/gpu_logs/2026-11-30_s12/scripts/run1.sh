#!/usr/bin/env bash
# session 12, call 1: validation of 7a71a00 (full CUDA tests, C ABI, Python) and profiles of the
# weakest prefill kernels: the wq kernel (int4 g128) at M = 1024 / 4096 against the 16-bit tile
# kernel, the short-K GEMM2 of qwen3-30b-a3b, and the int4 decode kernel (stall reasons).
B=build-gpu-carry; W=$OUT/r1; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
timeout 240 $B/test_cuda --gtest_brief=1 > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log; grep -E "^\[  FAILED" $W/test.log | head -20
OUT=$W QMOE_GPU_PHASES="capi python" timeout 120 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "capi/python rc $? $(el)"; grep -E "passed|failed|PASSED|FAILED" $W/gpu_tests.log | tail -4
NCU="ncu --clock-control none -k regex:align_|sm90_moe|sm90_gather|sm90_stream|reduce_|act_|moe_|route_|gather -c 9 --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size,sm__throughput.avg.pct_of_peak_sustained_elapsed,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"
for c in "qwen3-30b-a3b 1024 int4" "gpt-oss-120b 1024 int4" "deepseek-v3 1024 int4" "llama4-scout 1024 int4" "mixtral-8x7b 256 int4" "qwen3-30b-a3b 4096 int4" "gpt-oss-120b 4096 int4" "mixtral-8x7b 4096 int4" "mixtral-8x7b 4096 bf16" "qwen3-30b-a3b 1 int4" "llama4-scout 1 int4"; do
  set -- $c
  timeout 60 $NCU $B/qmoe bench --backend cuda --shape $1 --m $2 --scheme $3 --iters 1 --warmup 0 --settle-ms 0 > $W/ncu_$1_$2_$3.txt 2>&1; echo "ncu $c rc $? $(el)"
done
SEC="--section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis --section InstructionStats --section LaunchStats --section MemoryWorkloadAnalysis"
for c in "qwen3-30b-a3b 4096 int4 sm90_moe_wq 2" "mixtral-8x7b 4096 int4 sm90_moe_wq 1" "mixtral-8x7b 4096 bf16 sm90_moe_gemm 1" "qwen3-30b-a3b 1024 int4 sm90_moe_wq 2" "qwen3-30b-a3b 4096 bf16 sm90_moe_gemm 2" "llama4-scout 16 int4 moe_decode90 1"; do
  set -- $c
  timeout 120 ncu --clock-control none -k regex:$4 -c $5 $SEC $B/qmoe bench --backend cuda --shape $1 --m $2 --scheme $3 --iters 1 --warmup 0 --settle-ms 0 > $W/det_$1_$2_$3.txt 2>&1; echo "det $c rc $? $(el)"
done
cd $OUT && tar czf r1.tgz r1
