#!/usr/bin/env bash
# session 39, call 1 (session 38 run2.sh, which got no machine, rerun at 701861a)
# session 38 (second try), call 2: 256-row token tiles for fp4 units (NVFP4A16, NVFP4 W4A4, MXFP4).
# (a) their test (CudaSm90.WideTokenTiles, forced, now with three fp4 cases) and the other wq tile tests;
# (b) A/B in one binary, QMOE_CUDA_WQ_TN=128 against 256 (forced), MXFP4 and NVFP4A16 at M = 1024 / 4096
# on every shape (32-1024 rows per expert), two alternations, NVFP4 (W4A4) at M = 4096 once;
# (c) the whole GPU suite if the time allows.
B=build-gpu-carry; W=$OUT/r1; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv > $W/gpu.txt 2>&1; cat $W/gpu.txt
timeout 150 $B/test_cuda --gtest_filter='CudaSm90.WideTokenTiles:CudaSm90.QuantizedWeightTokenTiles:SelectSm90.*' > $W/wide_tests.log 2>&1; echo "wide tests rc $? $(el)"
grep -E "^\[  (PASSED|FAILED) |OK \]|FAILED \]" $W/wide_tests.log | head; grep -B2 -A12 "Failure" $W/wide_tests.log | head -60
(cd $OUT && tar czf r1.tgz r1)
for rep in 1 2; do
  for v in 128 256; do
    export QMOE_CUDA_WQ_TN=$v
    timeout 100 $B/qmoe bench --backend cuda --shape all --m 1024,4096 --scheme mxfp4,nvfp4a16 --json $W/t${v}_$rep.json > $W/t${v}_$rep.md 2>$W/t${v}_$rep.err
    echo "tn $v rep $rep rc $? $(el)"; tail -2 $W/t${v}_$rep.err
    if [ $rep = 1 ]; then
      timeout 50 $B/qmoe bench --backend cuda --shape all --m 4096 --scheme nvfp4 --json $W/t${v}_w4a4.json > $W/t${v}_w4a4.md 2>$W/t${v}_w4a4.err
      echo "tn $v nvfp4 rc $? $(el)"
    fi
    (cd $OUT && tar czf r1.tgz r1)
  done
done
unset QMOE_CUDA_WQ_TN
python3 bench/compare_rows.py "$W/t128_*.json" "$W/t256_*.json" > $W/compare_tn.txt 2>&1; cat $W/compare_tn.txt
grep -h -o '"kernels": "[^"]*"' $W/t256_1.json | sort | uniq -c | head
(cd $OUT && tar czf r1.tgz r1)
if [ $(el) -lt 330 ]; then
  OUT=$W QMOE_GPU_PHASES="info tests capi python" timeout $(( 585 - $(el) )) bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "suite rc $? $(el)"
  grep -E "PASSED|FAILED|passed|failed|rc " $W/gpu_tests.log | tail -12
fi
cd $OUT && tar czf r1.tgz r1
