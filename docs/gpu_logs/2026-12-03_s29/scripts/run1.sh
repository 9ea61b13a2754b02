#!/usr/bin/env bash
# session 29, call 1: the committed code (the twenty-eighth session's final h-quantization rule, not
# run on the GPU then, and this session's CPU layer change) through the whole CUDA suite, C ABI /
# Python; A/B of the h-quantization rule (QMOE_CUDA_H_QUANT_IN_GEMM2 unset = rule, 0 = act_prep)
# on fp8 M = 1 / 16 (every shape), twice; anchor rows of bf16 / fp8 / int4 / W8A8-int8 (issue 4)
# and MXFP4 / NVFP4A16 / W4A8-fp8 decode rows (issue 5).
B=build-gpu-carry; W=$OUT/r1; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
Q=$B/qmoe
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.limit,temperature.gpu --format=csv > $W/gpu.txt 2>&1
timeout 240 $B/test_cuda --gtest_brief=1 > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log; grep -E "^\[  FAILED" $W/test.log | head -20; grep -B2 -A8 "Failure" $W/test.log | head -40
OUT=$W QMOE_GPU_PHASES="capi python" timeout 45 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "capi/python rc $? $(el)"; grep -E "passed|failed|PASSED|FAILED|rc " $W/gpu_tests.log | tail -6
for rep in 1 2; do for v in r 0; do
  e=""; [ $v = 0 ] && e="QMOE_CUDA_H_QUANT_IN_GEMM2=0"
  env $e timeout 30 $Q bench --backend cuda --shape all --m 1,16 --scheme fp8 --json $W/hq${v}_$rep.json > $W/hq${v}_$rep.md 2>$W/hq${v}_$rep.err; echo "hq$v rep $rep rc $? $(el)"
done; done
python3 bench/compare_rows.py "$W/hq0_*.json" "$W/hqr_*.json" > $W/compare_hq.txt 2>&1; grep -v '^|---' $W/compare_hq.txt | cut -c1-110
timeout 170 $Q bench --backend cuda --shape all --m 1,16,64,256,1024,4096 --scheme bf16,fp8,int4,w8a8-int8 --json $W/anchors.json > $W/anchors.md 2>$W/anchors.err; echo "anchor rows rc $? $(el)"
python3 bench/perf_table.py $W/anchors.json 2>&1 | grep -E "^- " | head -12
timeout 90 $Q bench --backend cuda --shape all --m 1,16,64 --scheme mxfp4,nvfp4a16,w4a8-fp8 --json $W/fp4.json > $W/fp4.md 2>$W/fp4.err; echo "fp4 rows rc $? $(el)"
cd $OUT && tar czf r1.tgz r1
