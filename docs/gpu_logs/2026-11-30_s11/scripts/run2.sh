#!/usr/bin/env bash
# session 11, call 2: (call 1 ran the baseline bench; its ncu regex caught the bench's read ceiling) ncu per kernel of
# per kernel of the weakest rows (qwen3-30b-a3b fp8 / bf16 at every M, mixtral / deepseek fp8
# prefill, int4 rows whose experts overflow their M-block) to see where each layer's time goes.
B=build-gpu-carry; W=$OUT/r2; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
NCU="ncu --clock-control none -k regex:align_|sm90_moe|sm90_gather|sm90_stream|reduce_|act_|moe_|route_|gather -c 9 --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size,sm__throughput.avg.pct_of_peak_sustained_elapsed"
for c in "qwen3-30b-a3b 16 fp8" "qwen3-30b-a3b 256 fp8" "qwen3-30b-a3b 1024 fp8" "qwen3-30b-a3b 4096 fp8" "qwen3-30b-a3b 256 bf16" "qwen3-30b-a3b 4096 bf16" "mixtral-8x7b 1024 fp8" "deepseek-v3 4096 fp8" "llama4-scout 256 int4" "mixtral-8x7b 64 int4" "gpt-oss-120b 4096 fp8"; do
  set -- $c
  timeout 60 $NCU $B/qmoe bench --backend cuda --shape $1 --m $2 --scheme $3 --iters 1 --warmup 0 --settle-ms 0 > $W/ncu_$1_$2_$3.txt 2>&1; echo "ncu $c rc $? $(el)"
done
cd $OUT && tar czf r2.tgz r2
