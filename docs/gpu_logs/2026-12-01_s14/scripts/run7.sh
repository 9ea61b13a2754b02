#!/usr/bin/env bash
# session 14, call 7: validation of 253e54f (the whole CUDA suite, C ABI, Python) and, for the next
# session, a full ncu profile with per-SASS-instruction stall samples of the int4 bulk decode kernel
# (mixtral-8x7b M = 16, GEMM1: 4 rows per expert, 8-row M-blocks), which the r1-r3 instruction diet
# showed is not bound by its instruction issue.
B=build-gpu-carry; W=$OUT/r7; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
timeout 200 $B/test_cuda --gtest_brief=1 > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log; grep -E "^\[  FAILED" $W/test.log | head -20
OUT=$W QMOE_GPU_PHASES="capi python" timeout 60 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "capi/python rc $? $(el)"; grep -E "passed|failed|PASSED|FAILED" $W/gpu_tests.log | tail -4
timeout 60 ncu --clock-control none -k regex:moe_decode90 -c 1 --set full --import-source no -o $W/dec_mixtral16_int4 $B/qmoe bench --backend cuda --shape mixtral-8x7b --m 16 --scheme int4 --iters 1 --warmup 0 --settle-ms 0 > $W/ncu_run.txt 2>&1; echo "ncu rc $? $(el)"
timeout 30 ncu --import $W/dec_mixtral16_int4.ncu-rep --print-details all > $W/ncu_details.txt 2>&1; echo "details rc $? $(el)"
timeout 30 ncu --import $W/dec_mixtral16_int4.ncu-rep --page source --csv --print-source sass > $W/ncu_sass.csv 2>&1; echo "sass rc $? $(el)"
rm -f $W/dec_mixtral16_int4.ncu-rep
cd $OUT && tar czf r7.tgz r7
