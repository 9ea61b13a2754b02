#!/usr/bin/env bash
# session 23, call 3: the tile kernel's 16-bit A rows copied straight from x by its producer
# warpgroup (Sm90Gemm::a_src, cp.async into the swizzled stages; QMOE_CUDA_A_DIRECT=0 = gather + TMA).
# Its test first (stop on failure), then A/B over bf16 x every shape x M = 256 / 1024 / 4096
# alternating twice, ncu per kernel of qwen3-30b-a3b bf16 M = 4096, and the whole suite.
B=build-gpu-carry; W=$OUT/r3; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
Q=$B/qmoe
timeout 150 $B/test_cuda --gtest_brief=1 --gtest_filter='CudaSm90.DirectARows*' > $W/test_first.log 2>&1; rc=$?; echo "first tests rc $rc $(el)"; tail -3 $W/test_first.log; grep -B2 -A8 "Failure" $W/test_first.log | head -30
if [ $rc != 0 ]; then cd $OUT && tar czf r3.tgz r3; exit 1; fi
for rep in 1 2; do
  for v in gather direct; do
    e=QMOE_X=1; [ $v = gather ] && e=QMOE_CUDA_A_DIRECT=0
    env $e timeout 60 $Q bench --backend cuda --shape all --m 256,1024,4096 --scheme bf16 --json $W/${v}_$rep.json > $W/${v}_$rep.md 2>$W/${v}_$rep.err; echo "$v $rep rc $? $(el)"
  done
done
python3 bench/compare_rows.py "$W/gather_*.json" "$W/direct_*.json" > $W/compare.txt 2>&1; grep -v '^|---' $W/compare.txt | cut -c1-150
for v in gather direct; do
  e=QMOE_X=1; [ $v = gather ] && e=QMOE_CUDA_A_DIRECT=0
  env $e timeout 40 ncu --clock-control none -k 'regex:align_|sm90_moe|sm90_stream|sm90_gather|reduce_|act_|moe_|route_' -c 7 --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum $Q bench --backend cuda --shape qwen3-30b-a3b --m 4096 --scheme bf16 --iters 1 --warmup 0 --settle-ms 0 > $W/ncu_$v.txt 2>&1; echo "ncu $v rc $? $(el)"
  python3 bench/ncu_kernels.py $W/ncu_$v.txt 2>&1 | tail -8 | cut -c1-150
done
timeout 240 $B/test_cuda --gtest_brief=1 > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log; grep -E "^\[  FAILED" $W/test.log | head -20; grep -B2 -A8 "Failure" $W/test.log | head -40
OUT=$W QMOE_GPU_PHASES="capi python" timeout 60 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "capi/python rc $? $(el)"; grep -E "passed|failed|PASSED|FAILED|rc " $W/gpu_tests.log | tail -6
cd $OUT && tar czf r3.tgz r3
