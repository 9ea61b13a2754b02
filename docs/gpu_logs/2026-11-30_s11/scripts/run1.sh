#!/usr/bin/env bash
# session 11, call 1 (as run; its ncu regex "stream" also caught the bench's read-ceiling kernel, so
# run2.sh repeats the ncu part): ncu per kernel of the weakest rows, then the baseline bench at cfb46f9.
B=build-gpu-carry; W=$OUT/r1; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
NCU="ncu --clock-control none -k regex:align|moe_|reduce|act_|decode|gather|stream|sm90 -c 9 --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size,sm__throughput.avg.pct_of_peak_sustained_elapsed"
for c in "qwen3-30b-a3b 16 fp8" "qwen3-30b-a3b 256 fp8" "qwen3-30b-a3b 1024 fp8" "qwen3-30b-a3b 4096 fp8" "qwen3-30b-a3b 256 bf16" "qwen3-30b-a3b 4096 bf16" "mixtral-8x7b 1024 fp8" "deepseek-v3 4096 fp8" "llama4-scout 256 int4" "mixtral-8x7b 64 int4" "gpt-oss-120b 4096 fp8"; do
  set -- $c
  timeout 60 $NCU $B/qmoe bench --backend cuda --shape $1 --m $2 --scheme $3 --iters 1 --warmup 0 --settle-ms 0 > $W/ncu_$1_$2_$3.txt 2>&1; echo "ncu $c rc $? $(el)"
done
timeout 150 $B/qmoe bench --backend cuda --shape all --m 1,16,64,256,1024,4096 --scheme bf16,fp8,int4 --json $W/bench_all.json > $W/bench_all.md 2>$W/bench_all.err; echo "bench_all rc $? $(el)"
cd $OUT && tar czf r1.tgz r1
