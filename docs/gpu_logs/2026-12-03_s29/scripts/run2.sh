#!/usr/bin/env bash
# session 29, call 2: the h-quantization rule with I <= 2048 (d21505e) against QMOE_CUDA_H_QUANT_IN_GEMM2=0
# on fp8 M = 1 (every shape), three runs each; the selection and decode tests; the CPU-layer change
# (533bb83) is linked in but runs no GPU code.
B=build-gpu-carry; W=$OUT/r2; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
Q=$B/qmoe
timeout 120 $B/test_cuda --gtest_brief=1 --gtest_filter='Select*:CudaDecode*:DecodeFormats/*' > $W/test.log 2>&1; echo "tests rc $? $(el)"; tail -3 $W/test.log; grep -B2 -A8 "Failure" $W/test.log | head -30
for rep in 1 2 3; do for v in r 0; do
  e=""; [ $v = 0 ] && e="QMOE_CUDA_H_QUANT_IN_GEMM2=0"
  env $e timeout 30 $Q bench --backend cuda --shape all --m 1 --scheme fp8 --json $W/hq${v}_$rep.json > $W/hq${v}_$rep.md 2>$W/hq${v}_$rep.err; echo "hq$v rep $rep rc $? $(el)"
done; done
python3 bench/compare_rows.py "$W/hq0_*.json" "$W/hqr_*.json" > $W/compare_hq.txt 2>&1; grep -v '^|---' $W/compare_hq.txt | cut -c1-110
cd $OUT && tar czf r2.tgz r2
