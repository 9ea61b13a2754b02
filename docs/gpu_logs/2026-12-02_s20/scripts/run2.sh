#!/usr/bin/env bash
# session 20, call 2: r1's binaries lacked the striding gathers (sm90_moe_gemm.cu's object was
# compiled from the file as it was being edited; r1's gather A/B compares one kernel with itself).
# Now: the whole CUDA suite; the striding gathers (default grid) against one block per position
# group (QMOE_CUDA_GATHER_BLOCKS=0) over bf16 / fp8 / int4 / INT8 / W4A8-fp8 / MXFP4 x every shape
# x M = 256 / 1024 / 4096, alternating twice; per-kernel ncu of INT8 M = 4096 (gpt-oss-120b,
# qwen3-30b-a3b) under both grids; ncu --set full of the h gather on the default grid.
B=build-gpu-carry; W=$OUT/r2; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
Q=$B/qmoe
timeout 280 $B/test_cuda --gtest_brief=1 > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log; grep -E "^\[  FAILED" $W/test.log | head -20; grep -B2 -A10 "Failure" $W/test.log | head -40
for rep in 1 2; do
  for v in g0 gd; do
    e=QMOE_X=1; [ $v = g0 ] && e=QMOE_CUDA_GATHER_BLOCKS=0
    env $e timeout 150 $Q bench --backend cuda --shape all --m 256,1024,4096 --scheme bf16,fp8,int4,w8a8-int8,w4a8-fp8,mxfp4 --json $W/${v}_$rep.json > $W/${v}_$rep.md 2>$W/${v}_$rep.err; echo "$v $rep rc $? $(el)"
  done
done
python3 bench/compare_rows.py "$W/g0_*.json" "$W/gd_*.json" > $W/compare.txt 2>&1; grep -v '^|---' $W/compare.txt | cut -c1-150
for sh in gpt-oss-120b qwen3-30b-a3b; do for v in g0 gd; do
  e=QMOE_X=1; [ $v = g0 ] && e=QMOE_CUDA_GATHER_BLOCKS=0
  env $e timeout 90 ncu --clock-control none -k 'regex:align_|sm90_moe|sm90_gather|sm90_stream|reduce_|act_|moe_|route_' -c 10 --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum $Q bench --backend cuda --shape $sh --m 4096 --scheme w8a8-int8 --iters 1 --warmup 0 --settle-ms 0 > $W/ncu_${sh}_$v.txt 2>&1; echo "ncu $sh $v rc $? $(el)"
  python3 bench/ncu_kernels.py $W/ncu_${sh}_$v.txt 2>&1 | grep -E "gather|sum"
done; done
timeout 120 ncu --clock-control none --set full -k regex:sm90_gather_warp --launch-skip 1 --launch-count 1 $Q bench --backend cuda --shape gpt-oss-120b --m 4096 --scheme w8a8-int8 --iters 1 --warmup 0 --settle-ms 0 > $W/ncu_hgather.txt 2>&1; echo "ncu rc $? $(el)"
grep -E "Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|Warp Cycles Per Issued|L2 Hit|Compute \(SM\) Throughput|Grid Size|Waves|Executed Ipc|Issue Slots" $W/ncu_hgather.txt | head -30
cd $OUT && tar czf r2.tgz r2
