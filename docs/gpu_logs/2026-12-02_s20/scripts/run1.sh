#!/usr/bin/env bash
# session 20, call 1 (HEAD with INT8's stream rule): the whole CUDA suite, the C ABI and Python
# phases; then INT8 W8A8 over every anchor shape x M = 1..4096 twice (default rule), and the rows
# the new rule moves (deepseek-v3 / gpt-oss-120b / qwen3-30b-a3b M = 16 / 64) against
# QMOE_CUDA_STREAM=0 (the previous rule on those rows), alternating twice; the striding gathers
# against one block per position group (QMOE_CUDA_GATHER_BLOCKS=0): INT8 M = 1024 / 4096 rows and
# per-kernel ncu durations of gpt-oss-120b / qwen3-30b-a3b INT8 M = 4096.
B=build-gpu-carry; W=$OUT/r1; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
Q=$B/qmoe
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,driver_version --format=csv > $W/gpu.txt 2>&1
timeout 280 $B/test_cuda --gtest_brief=1 > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log; grep -E "^\[  FAILED" $W/test.log | head -20
OUT=$W QMOE_GPU_PHASES="capi python" timeout 120 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "capi/python rc $? $(el)"; grep -E "passed|failed|PASSED|FAILED|rc " $W/gpu_tests.log | tail -6
for rep in 1 2; do
  timeout 100 $Q bench --backend cuda --shape all --m 1,16,64,256,1024,4096 --scheme w8a8-int8 --json $W/all_$rep.json > $W/all_$rep.md 2>$W/all_$rep.err; echo "all $rep rc $? $(el)"
  for v in old new; do
    e=QMOE_X=1; [ $v = old ] && e=QMOE_CUDA_STREAM=0
    env $e timeout 60 $Q bench --backend cuda --shape deepseek-v3,gpt-oss-120b,qwen3-30b-a3b --m 16,64 --scheme w8a8-int8 --json $W/${v}_$rep.json > $W/${v}_$rep.md 2>$W/${v}_$rep.err; echo "$v $rep rc $? $(el)"
  done
done
python3 bench/compare_rows.py "$W/old_*.json" "$W/new_*.json" > $W/compare.txt 2>&1; grep -v '^|---' $W/compare.txt | cut -c1-150
python3 bench/compare_rows.py "$W/all_1.json" "$W/all_2.json" > $W/repeat.txt 2>&1; grep -v '^|---' $W/repeat.txt | cut -c1-150
for rep in 1 2; do
  for v in g0 gd; do
    e=QMOE_X=1; [ $v = g0 ] && e=QMOE_CUDA_GATHER_BLOCKS=0
    env $e timeout 90 $Q bench --backend cuda --shape all --m 1024,4096 --scheme w8a8-int8 --json $W/${v}_$rep.json > $W/${v}_$rep.md 2>$W/${v}_$rep.err; echo "$v $rep rc $? $(el)"
  done
done
python3 bench/compare_rows.py "$W/g0_*.json" "$W/gd_*.json" > $W/compare_gather.txt 2>&1; grep -v '^|---' $W/compare_gather.txt | cut -c1-150
for sh in gpt-oss-120b qwen3-30b-a3b; do for v in g0 gd; do
  e=QMOE_X=1; [ $v = g0 ] && e=QMOE_CUDA_GATHER_BLOCKS=0
  env $e timeout 90 ncu --clock-control none -k 'regex:align_|sm90_moe|sm90_gather|sm90_stream|reduce_|act_|moe_|route_' -c 10 --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum $Q bench --backend cuda --shape $sh --m 4096 --scheme w8a8-int8 --iters 1 --warmup 0 --settle-ms 0 > $W/ncu_${sh}_$v.txt 2>&1; echo "ncu $sh $v rc $? $(el)"
  python3 bench/ncu_kernels.py $W/ncu_${sh}_$v.txt 2>&1 | grep -E "gather|sum"
done; done
# what limits the h gather (int8 per-token quantization of GEMM1's output, 87 us at gpt-oss-120b M = 4096)
timeout 120 ncu --clock-control none --set full -k regex:sm90_gather_warp --launch-skip 1 --launch-count 1 $Q bench --backend cuda --shape gpt-oss-120b --m 4096 --scheme w8a8-int8 --iters 1 --warmup 0 --settle-ms 0 > $W/ncu_hgather.txt 2>&1; echo "ncu rc $? $(el)"
grep -E "Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|Warp Cycles Per Issued|Stall|L2 Hit|Compute \(SM\) Throughput|Grid Size|Waves" $W/ncu_hgather.txt | head -30
cd $OUT && tar czf r1.tgz r1
