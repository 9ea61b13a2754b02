#!/usr/bin/env bash
# session 10, call 7: the streaming Hopper kernel (weights as wgmma's A): its test, then A/B on
# bf16 / fp8 rows: default (tile kernels, decode kernels) / stream where the Hopper path runs /
# stream everywhere (QMOE_CUDA_WGMMA_MIN_ROWS=1), M-block 16 / 64 by the rule.
B=build-gpu-carry; W=$OUT/r7; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
QMOE_CUDA_SYNC_CHECK=1 timeout 120 $B/test_cuda --gtest_filter='CudaSm90.*' > $W/test_sm90.log 2>&1; echo "test sm90 rc $? $(el)"; grep -E "OK \]|FAILED|Failure|rror" $W/test_sm90.log | head -20
R="--backend cuda --shape all --m 1,16,64,256,1024,4096 --scheme bf16,fp8"
timeout 100 $B/qmoe bench $R --json $W/def.json > $W/def.md 2>&1; echo "def rc $? $(el)"
QMOE_CUDA_STREAM=1 timeout 100 $B/qmoe bench $R --json $W/st.json > $W/st.md 2>&1; echo "st rc $? $(el)"
QMOE_CUDA_STREAM=1 QMOE_CUDA_WGMMA_MIN_ROWS=1 timeout 100 $B/qmoe bench $R --json $W/st1.json > $W/st1.md 2>&1; echo "st1 rc $? $(el)"
QMOE_CUDA_STREAM=1 QMOE_CUDA_STREAM_NT=64 timeout 60 $B/qmoe bench --backend cuda --shape all --m 256 --scheme bf16,fp8 --json $W/st64.json > $W/st64.md 2>&1; echo "st64 rc $? $(el)"
QMOE_CUDA_STREAM=1 QMOE_CUDA_STREAM_NT=16 timeout 60 $B/qmoe bench --backend cuda --shape all --m 1024 --scheme bf16,fp8 --json $W/st16.json > $W/st16.md 2>&1; echo "st16 rc $? $(el)"
NCU="ncu --clock-control none -k regex:sm90_stream|align|gather|reduce -c 6 --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active"
for c in "qwen3-30b-a3b 256 fp8" "mixtral-8x7b 64 bf16" "qwen3-30b-a3b 1024 fp8"; do
  set -- $c
  QMOE_CUDA_STREAM=1 QMOE_CUDA_WGMMA_MIN_ROWS=1 timeout 60 $NCU $B/qmoe bench --backend cuda --shape $1 --m $2 --scheme $3 --iters 1 --warmup 0 --settle-ms 0 > $W/ncu_$1_$2_$3.txt 2>&1; echo "ncu $c rc $? $(el)"
done
cd $OUT && tar czf r7.tgz r7
