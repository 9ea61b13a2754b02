#!/usr/bin/env bash
# session 23, call 1 (79374dd + align zeroing the tile counters, no memset): which Hopper kernel each M = 16-1024 row should
# take. The kernels the rules pick (def) against forced alternatives, bf16 / fp8 / INT8 x every shape:
# s16 / s64 = the streaming kernel with 16- / 64-row M-blocks (QMOE_CUDA_STREAM=1, _NT), t64 / t128 =
# the tile kernel from 1 row per expert with 64- / 128-row M-blocks (QMOE_CUDA_WGMMA_MIN_ROWS=1,
# QMOE_CUDA_WG64_MAX_ROWS). ncu per kernel of qwen3-30b-a3b bf16 M = 256 and mixtral-8x7b fp8 M = 1024.
B=build-gpu-carry; W=$OUT/r1; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
Q=$B/qmoe
timeout 120 $B/test_cuda --gtest_brief=1 --gtest_filter='CudaAlign.*:CudaSm90.Persistent*:CudaLayer.*' > $W/test_first.log 2>&1; echo "first tests rc $? $(el)"; tail -3 $W/test_first.log; grep -B2 -A8 "Failure" $W/test_first.log | head -30
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.limit,temperature.gpu --format=csv > $W/gpu.txt 2>&1
run() {  # name M-list env...
  local n=$1 m=$2; shift 2
  env "$@" timeout 90 $Q bench --backend cuda --shape all --m $m --scheme bf16,fp8,w8a8-int8 --json $W/$n.json > $W/$n.md 2>$W/$n.err; echo "$n rc $? $(el)"
}
for rep in 1 2; do
  run def_$rep 16,64,256,1024 QMOE_X=1
  run t64_$rep 16,64,256,1024 QMOE_CUDA_WGMMA_MIN_ROWS=1 QMOE_CUDA_WG64_MAX_ROWS=100000
  run t128_$rep 64,256,1024 QMOE_CUDA_WGMMA_MIN_ROWS=1 QMOE_CUDA_WG64_MAX_ROWS=0
  run s16_$rep 16,64,256 QMOE_CUDA_STREAM=1 QMOE_CUDA_STREAM_NT=16
  run s64_$rep 16,64,256 QMOE_CUDA_STREAM=1 QMOE_CUDA_STREAM_NT=64
done
for v in t64 t128 s16 s64; do
  python3 bench/compare_rows.py "$W/def_*.json" "$W/${v}_*.json" > $W/compare_$v.txt 2>&1; echo "== $v"; grep -v '^|---' $W/compare_$v.txt | cut -c1-120
done
for c in "bf16 qwen3-30b-a3b 256" "fp8 mixtral-8x7b 1024" "bf16 qwen3-30b-a3b 4096"; do set -- $c
  timeout 40 ncu --clock-control none -k 'regex:align_|sm90_|reduce_|act_|moe_|route_' -c 10 --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum $Q bench --backend cuda --shape $2 --m $3 --scheme $1 --iters 1 --warmup 0 --settle-ms 0 > $W/ncu_$1_$2_$3.txt 2>&1; echo "ncu $1 $2 $3 rc $? $(el)"
  python3 bench/ncu_kernels.py $W/ncu_$1_$2_$3.txt 2>&1 | tail -14
done
cd $OUT && tar czf r1.tgz r1
