#!/usr/bin/env bash
# session 28, call 1: HEAD's decode plan (8b59261 / d124774, not run in session 27) and the trimmed
# last weight boxes (QMOE_CUDA_TRIM_BOX). Decode + trim tests first, then the whole CUDA suite;
# A/B QMOE_CUDA_DECODE90_BALANCE 0 / 1 on the rows the final rule changed; A/B QMOE_CUDA_TRIM_BOX
# 0 / 1 (alternating, twice) on gpt-oss-120b (the only anchor shape with N not a multiple of 256);
# ncu bytes of the streaming kernel (gpt-oss-120b / deepseek-v3 fp8 M = 64); C ABI / Python.
B=build-gpu-carry; W=$OUT/r1; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
Q=$B/qmoe
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.limit,temperature.gpu --format=csv > $W/gpu.txt 2>&1
timeout 120 $B/test_cuda --gtest_brief=1 --gtest_filter='Select*:CudaDecode*:DecodeFormats/*:CudaSm90.TrimmedLastBox*' > $W/test_first.log 2>&1; rc=$?; echo "first tests rc $rc $(el)"; tail -2 $W/test_first.log; grep -B2 -A8 "Failure" $W/test_first.log | head -30
if [ $rc != 0 ]; then cd $OUT && tar czf r1.tgz r1; exit 1; fi
timeout 240 $B/test_cuda --gtest_brief=1 --gtest_filter='-CudaSm90.TrimmedLastBox*' > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log; grep -E "^\[  FAILED" $W/test.log | head -20; grep -B2 -A8 "Failure" $W/test.log | head -40
for v in 0 1; do
  QMOE_CUDA_DECODE90_BALANCE=$v timeout 40 $Q bench --backend cuda --shape qwen3-30b-a3b,llama4-scout --m 1,16,64 --scheme fp8,int4,int8,mxfp4 --json $W/bal${v}.json > $W/bal${v}.md 2>$W/bal${v}.err; echo "bal$v rc $? $(el)"
done
python3 bench/compare_rows.py "$W/bal0.json" "$W/bal1.json" > $W/compare_bal.txt 2>&1; grep -v '^|---' $W/compare_bal.txt | cut -c1-100
for rep in 1 2; do for v in 0 1; do
  QMOE_CUDA_TRIM_BOX=$v timeout 45 $Q bench --backend cuda --shape gpt-oss-120b --m 16,64,256,1024,4096 --scheme bf16,fp8,w8a8-int8 --json $W/trim${v}_$rep.json > $W/trim${v}_$rep.md 2>$W/trim${v}_$rep.err; echo "trim$v rep $rep rc $? $(el)"
done; done
python3 bench/compare_rows.py "$W/trim0_*.json" "$W/trim1_*.json" > $W/compare_trim.txt 2>&1; grep -v '^|---' $W/compare_trim.txt | cut -c1-110
for v in 0 1; do for sh in gpt-oss-120b deepseek-v3; do
  QMOE_CUDA_TRIM_BOX=$v timeout 40 ncu --clock-control none -k 'regex:sm90_stream|sm90_gather|act_|align_|reduce_' -c 12 --metrics gpu__time_duration.sum,dram__bytes_read.sum,lts__t_bytes.sum $Q bench --backend cuda --shape $sh --m 64 --scheme fp8 --iters 1 --warmup 0 --settle-ms 0 > $W/ncu_${sh}_trim$v.txt 2>&1; echo "ncu $sh trim$v rc $? $(el)"
  python3 bench/ncu_kernels.py $W/ncu_${sh}_trim$v.txt 2>&1 | tail -12
done; done
OUT=$W QMOE_GPU_PHASES="capi python" timeout 45 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "capi/python rc $? $(el)"; grep -E "passed|failed|PASSED|FAILED|rc " $W/gpu_tests.log | tail -6
cd $OUT && tar czf r1.tgz r1
