#!/usr/bin/env bash
# session 18, call 3 (c0ccc7c binaries, measurements only): INT8 W8A8 where the rule keeps the
# mma.sync / decode kernels (qwen3-30b-a3b M = 64 / 256, deepseek-v3 / gpt-oss-120b M = 64) against
# the Hopper kernels forced by environment (wgmma64 from 16 rows; stream NT 16 / 64), alternating
# twice; then per-kernel ncu durations of the INT8 M = 4096 layers of gpt-oss-120b and qwen3-30b-a3b.
B=build-gpu-carry; W=$OUT/r3; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
Q=$B/qmoe
run() {  # name env... : qwen3 M = 64 / 256, deepseek-v3 / gpt-oss-120b M = 64, mixtral M = 1024
  local n=$1; shift
  env "$@" timeout 100 $Q bench --backend cuda --shape qwen3-30b-a3b --m 64,256 --scheme w8a8-int8 --json $W/${n}_q.json > $W/${n}_q.md 2>&1
  env "$@" timeout 100 $Q bench --backend cuda --shape deepseek-v3,gpt-oss-120b --m 64 --scheme w8a8-int8 --json $W/${n}_d.json > $W/${n}_d.md 2>&1
  echo "$n rc $? $(el)"
}
for rep in 1 2; do
  run def_$rep QMOE_X=1
  run wg16_$rep QMOE_CUDA_WGMMA_MIN_ROWS=1
  run st16_$rep QMOE_CUDA_STREAM=1 QMOE_CUDA_STREAM_NT=16
  run st64_$rep QMOE_CUDA_STREAM=1 QMOE_CUDA_STREAM_NT=64
done
for v in wg16 st16 st64; do python3 bench/compare_rows.py "$W/def_*.json" "$W/${v}_*.json" $v 2>&1 | grep -v '^|---' | cut -c1-140; done
for sh in gpt-oss-120b qwen3-30b-a3b; do
  timeout 90 ncu --clock-control none -k 'regex:align_|sm90_moe|sm90_gather|sm90_stream|reduce_|act_|moe_|route_' -c 10 --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum $Q bench --backend cuda --shape $sh --m 4096 --scheme w8a8-int8 --iters 1 --warmup 0 --settle-ms 0 > $W/ncu_$sh.txt 2>&1; echo "ncu $sh rc $? $(el)"
  python3 bench/ncu_kernels.py $W/ncu_$sh.txt 2>&1 | tail -12
done
cd $OUT && tar czf r3.tgz r3
