#!/usr/bin/env bash
# session 18, call 2: INT8 W8A8 gets fp8's Hopper menu: the streaming kernel (weights as IGMMA's A,
# M-blocks of 16 / 64 rows), 64-row M-blocks on the 128 x 256 tile (each warpgroup n128), the
# 16-rows-per-expert threshold with <= 16 experts, int8 per-token quantization in the one-warp-per-row
# gather (quant 4) and x quantized once per token (x-once). qmoe_base = r1's new binary (HEAD
# before this change). Suites, then the A/B over every M alternating twice, then per-kernel ncu
# durations of deepseek-v3 INT8 M = 4096 (new), then the whole CUDA suite.
B=build-gpu-carry; W=$OUT/r2; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
xz -dc $B/qmoe_base.xz > $B/qmoe_base && chmod +x $B/qmoe_base; cp $B/qmoe $B/qmoe_new
timeout 200 $B/test_cuda --gtest_brief=1 --gtest_filter='CudaSm90.*:QSchemes/*:CudaQ*:Select*' > $W/test_sm90.log 2>&1; echo "test sm90 rc $? $(el)"; tail -2 $W/test_sm90.log; grep -E "^\[  FAILED" $W/test_sm90.log | head -20; grep -B2 -A8 "Failure" $W/test_sm90.log | head -60
for rep in 1 2; do
  for v in base new; do
    timeout 150 $B/qmoe_$v bench --backend cuda --shape all --m 1,16,64,256,1024,4096 --scheme w8a8-int8,w4a8-int8 --json $W/${v}_$rep.json > $W/${v}_$rep.md 2>$W/${v}_$rep.err; echo "$v $rep rc $? $(el)"
  done
done
python3 bench/compare_rows.py "$W/base_*.json" "$W/new_*.json" > $W/compare.txt 2>&1; cat $W/compare.txt | grep -v '^|---' | cut -c1-150
for v in base new; do
  timeout 90 ncu --clock-control none -k 'regex:align_|sm90_|reduce_|act_|moe_|route_|topk' -c 12 --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum $B/qmoe_$v bench --backend cuda --shape deepseek-v3 --m 4096 --scheme w8a8-int8 --iters 1 --warmup 0 --settle-ms 0 > $W/ncu_ds4096_$v.txt 2>&1; echo "ncu $v rc $? $(el)"
  python3 bench/ncu_kernels.py $W/ncu_ds4096_$v.txt 2>&1 | tail -16
done
timeout 250 $B/test_cuda --gtest_brief=1 > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log; grep -E "^\[  FAILED" $W/test.log | head -20
cd $OUT && tar czf r2.tgz r2
