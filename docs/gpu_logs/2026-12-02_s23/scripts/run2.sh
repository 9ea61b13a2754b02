#!/usr/bin/env bash
# session 23, call 2: the new Hopper rules (16-bit / fp8 on the tile kernel from 16 rows per expert
# for any expert count; the streaming kernel for fp8 at 1-8 rows with >= 10 items per SM and for
# 16-bit at 5-8 rows with >= 24) and align zeroing the tile counters. The whole CUDA suite, C ABI,
# Python; the anchor rows (bf16 / fp8 / int4 / INT8 x every shape x M = 1-4096); ncu per kernel of
# a few rows.
B=build-gpu-carry; W=$OUT/r2; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
Q=$B/qmoe
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.limit,temperature.gpu --format=csv > $W/gpu.txt 2>&1
timeout 240 $B/test_cuda --gtest_brief=1 > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log; grep -E "^\[  FAILED" $W/test.log | head -20; grep -B2 -A8 "Failure" $W/test.log | head -40
OUT=$W QMOE_GPU_PHASES="capi python" timeout 60 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "capi/python rc $? $(el)"; grep -E "passed|failed|PASSED|FAILED|rc " $W/gpu_tests.log | tail -6
timeout 150 $Q bench --backend cuda --shape all --m 1,16,64,256,1024,4096 --scheme bf16,fp8,int4,w8a8-int8 --json $W/anchors.json > $W/anchors.md 2>$W/anchors.err; echo "anchor rows rc $? $(el)"
python3 bench/perf_table.py $W/anchors.json 2>&1 | grep -E "^- " | head -8
for c in "bf16 qwen3-30b-a3b 256" "bf16 qwen3-30b-a3b 4096" "fp8 qwen3-30b-a3b 16" "fp8 mixtral-8x7b 1024" "fp8 deepseek-v3 64"; do set -- $c
  timeout 60 ncu --clock-control none -k 'regex:align_|sm90_moe|sm90_stream|sm90_gather|reduce_|act_|moe_|route_' -c 12 --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum $Q bench --backend cuda --shape $2 --m $3 --scheme $1 --iters 1 --warmup 0 --settle-ms 0 > $W/ncu_$1_$2_$3.txt 2>&1; echo "ncu $1 $2 $3 rc $? $(el)"
  python3 bench/ncu_kernels.py $W/ncu_$1_$2_$3.txt 2>&1 | tail -14 | cut -c1-150
done
cd $OUT && tar czf r2.tgz r2
