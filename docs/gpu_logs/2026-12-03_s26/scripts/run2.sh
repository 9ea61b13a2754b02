#!/usr/bin/env bash
# session 26, call 2: the committed fp8 128 x 256 tiles (Sm90Gemm::fp8_wide) and the fp8 Hopper
# tolerance 2^-1. The whole CUDA suite; per-kernel times (ncu) of fp8 rows below 80% of floor on the
# memory-bound kernels; the anchor rows; C ABI / Python.
B=build-gpu-carry; W=$OUT/r2; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
Q=$B/qmoe
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.limit,temperature.gpu --format=csv > $W/gpu.txt 2>&1
timeout 280 $B/test_cuda --gtest_brief=1 > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log; grep -E "^\[  FAILED" $W/test.log | head -20; grep -B2 -A8 "Failure" $W/test.log | head -40
for row in "qwen3-30b-a3b 16" "qwen3-30b-a3b 64" "gpt-oss-120b 64" "llama4-scout 16"; do
  set -- $row
  timeout 40 ncu --clock-control none -k 'regex:align_|sm90_moe|sm90_stream|sm90_gather|reduce_|act_|moe_|route_|quant|decode' -c 12 --metrics gpu__time_duration.sum,dram__bytes_read.sum $Q bench --backend cuda --shape $1 --m $2 --scheme fp8 --iters 1 --warmup 0 --settle-ms 0 > $W/ncu_k_$1_$2.txt 2>&1; echo "ncu k $1 $2 rc $? $(el)"
  python3 bench/ncu_kernels.py $W/ncu_k_$1_$2.txt | cut -c1-130
done
timeout 170 $Q bench --backend cuda --shape all --m 1,16,64,256,1024,4096 --scheme bf16,fp8,int4,w8a8-int8 --json $W/anchors.json > $W/anchors.md 2>$W/anchors.err; echo "anchor rows rc $? $(el)"
python3 bench/perf_table.py $W/anchors.json 2>&1 | grep -E "^- " | head -8
OUT=$W QMOE_GPU_PHASES="capi python" timeout 40 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "capi/python rc $? $(el)"; grep -E "passed|failed|PASSED|FAILED|rc " $W/gpu_tests.log | tail -6
cd $OUT && tar czf r2.tgz r2
