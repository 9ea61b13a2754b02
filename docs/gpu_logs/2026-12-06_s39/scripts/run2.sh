#!/usr/bin/env bash
# session 39, call 2: where the int4 wq kernel's consumers stall on 128-row token tiles (the
# 128-rows-per-expert shapes that miss 4x vLLM-Triton at M = 4096), against the 256-row tile that
# reached ~81% of floor on mixtral-8x7b: ncu of GEMM1 (first wq launch) with the speed-of-light,
# scheduler and warp-state sections, the tensor pipe's activity and the SASS stall samples.
B=build-gpu-carry; W=$OUT/r2; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv > $W/gpu.txt 2>&1; cat $W/gpu.txt
which ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null
prof() {  # name shape m [env]
  timeout 150 env $4 ncu --clock-control none -k 'regex:sm90_moe_wq' -c 1 --section SpeedOfLight --section SchedulerStats \
    --section WarpStateStats --section MemoryWorkloadAnalysis \
    --metrics gpu__time_duration.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,sm__warps_active.avg.pct_of_peak_sustained_active \
    $B/qmoe bench --backend cuda --shape $2 --m $3 --scheme int4 --iters 1 --warmup 0 --settle-ms 0 > $W/ncu_$1.txt 2>&1
  echo "ncu $1 rc $? $(el)"
  grep -E "Duration|tensor_op|Issue Slots Busy|Issued Ipc|No Eligible|Eligible Warps|Warp Cycles Per Issued|Stall|Shared|Memory Throughput|L2 Cache Throughput|inst_executed.sum|wavefronts" $W/ncu_$1.txt | cut -c1-150 | head -40
  (cd $OUT && tar czf r2.tgz r2)
}
prof gptoss_4096 gpt-oss-120b 4096
prof deepseek_4096 deepseek-v3 4096
prof mixtral_4096_tn256 mixtral-8x7b 4096
prof mixtral_4096_tn128 mixtral-8x7b 4096 QMOE_CUDA_WQ_TN=128
timeout 150 ncu --clock-control none -k 'regex:sm90_moe_wq' -c 1 --section SourceCounters --section WarpStateStats --page source --print-source sass --csv \
  $B/qmoe bench --backend cuda --shape gpt-oss-120b --m 4096 --scheme int4 --iters 1 --warmup 0 --settle-ms 0 > $W/sass_gptoss.csv 2>&1
echo "sass rc $? $(el)"; xz -9 $W/sass_gptoss.csv
python3 bench/ncu_sass_hot.py $W/sass_gptoss.csv.xz --top 40 > $W/sass_gptoss_hot.txt 2>&1; head -80 $W/sass_gptoss_hot.txt
cd $OUT && tar czf r2.tgz r2
