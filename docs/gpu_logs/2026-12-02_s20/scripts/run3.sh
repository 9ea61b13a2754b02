#!/usr/bin/env bash
# session 20, call 3: the quantizing gathers' instruction diet (device_common.cuh: RowDiv or the
# division chosen once per row, the router-weight flag a template parameter, INT8 codes by
# RowDiv::small + int8_code_bits). qmoe_base = HEAD 6b75c10's sm90_moe_gemm.cu / moe_kernels.cu.
# The whole CUDA suite; A/B over bf16 / fp8 / int4 / INT8 / W4A8-fp8 x every shape x M = 64 / 256 /
# 1024 / 4096, alternating twice; per-kernel ncu of INT8 and fp8 M = 4096 (gpt-oss-120b,
# qwen3-30b-a3b) on both binaries.
B=build-gpu-carry; W=$OUT/r3; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
xz -dc $B/qmoe_base.xz > $B/qmoe_base && chmod +x $B/qmoe_base; cp $B/qmoe $B/qmoe_new
timeout 280 $B/test_cuda --gtest_brief=1 > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log; grep -E "^\[  FAILED" $W/test.log | head -20; grep -B2 -A10 "Failure" $W/test.log | head -40
for rep in 1 2; do
  for v in base new; do
    timeout 150 $B/qmoe_$v bench --backend cuda --shape all --m 64,256,1024,4096 --scheme bf16,fp8,int4,w8a8-int8,w4a8-fp8 --json $W/${v}_$rep.json > $W/${v}_$rep.md 2>$W/${v}_$rep.err; echo "$v $rep rc $? $(el)"
  done
done
python3 bench/compare_rows.py "$W/base_*.json" "$W/new_*.json" > $W/compare.txt 2>&1; grep -v '^|---' $W/compare.txt | cut -c1-150
for sc in w8a8-int8 fp8; do for sh in gpt-oss-120b qwen3-30b-a3b; do for v in base new; do
  timeout 90 ncu --clock-control none -k 'regex:align_|sm90_moe|sm90_gather|sm90_stream|reduce_|act_|moe_|route_' -c 10 --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum $B/qmoe_$v bench --backend cuda --shape $sh --m 4096 --scheme $sc --iters 1 --warmup 0 --settle-ms 0 > $W/ncu_${sc}_${sh}_$v.txt 2>&1; echo "ncu $sc $sh $v rc $? $(el)"
  python3 bench/ncu_kernels.py $W/ncu_${sc}_${sh}_$v.txt 2>&1 | grep -E "gather|sum"
done; done; done
cd $OUT && tar czf r3.tgz r3
