#!/usr/bin/env bash
# session 20, call 4 (final): the 1x128 fp8 gather (quant 2) choosing RowDiv or the division once
# per chunk instead of per element; qmoe_base = HEAD 96d9e48's sm90_moe_gemm.cu / moe_kernels.cu.
# The whole CUDA suite, the C ABI and Python phases, then fp8-block (the quant-2 rows) and fp8 as
# the control over every shape x M = 256 / 1024 / 4096, alternating twice.
B=build-gpu-carry; W=$OUT/r4; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
xz -dc $B/qmoe_base.xz > $B/qmoe_base && chmod +x $B/qmoe_base; cp $B/qmoe $B/qmoe_new
timeout 250 $B/test_cuda --gtest_brief=1 > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log; grep -E "^\[  FAILED" $W/test.log | head -20; grep -B2 -A10 "Failure" $W/test.log | head -40
OUT=$W QMOE_GPU_PHASES="capi python" timeout 100 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "capi/python rc $? $(el)"; grep -aE "passed|failed|PASSED|FAILED|rc " $W/gpu_tests.log | tail -6
for rep in 1 2; do
  for v in base new; do
    timeout 70 $B/qmoe_$v bench --backend cuda --shape all --m 256,1024,4096 --scheme fp8-block,fp8 --json $W/${v}_$rep.json > $W/${v}_$rep.md 2>$W/${v}_$rep.err; echo "$v $rep rc $? $(el)"
  done
done
python3 bench/compare_rows.py "$W/base_*.json" "$W/new_*.json" > $W/compare.txt 2>&1; grep -v '^|---' $W/compare.txt | cut -c1-150
cd $OUT && tar czf r4.tgz r4
