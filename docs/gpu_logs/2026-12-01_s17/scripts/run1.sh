#!/usr/bin/env bash
# session 17, call 1: W4A8 with fp8 per-token activations on QGMMA (Sm90Gemm::q8). The Hopper
# suites first (gathers with kperm, the new layer test, every other sm90 test), the selection /
# kperm CPU tests; then W4A8-fp8 rows at M = 256 / 1024 / 4096 with QMOE_CUDA_W4A8_QGMMA=0 / 1
# alternating twice (one binary), the fp8 W8A8 rows beside them for the kernel they should approach;
# then the whole suite.
B=build-gpu-carry; W=$OUT/r1; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
timeout 200 $B/test_cuda --gtest_brief=1 --gtest_filter='CudaSm90.*:Sm90KPerm*:Select*' > $W/test_sm90.log 2>&1; echo "test sm90 rc $? $(el)"; tail -2 $W/test_sm90.log; grep -E "^\[  FAILED" $W/test_sm90.log | head -20; grep -B2 -A8 "Failure" $W/test_sm90.log | head -60
for rep in 1 2; do
  for v in 0 1; do
    QMOE_CUDA_W4A8_QGMMA=$v timeout 150 $B/qmoe bench --backend cuda --shape all --m 256,1024,4096 --scheme w4a8-fp8 --json $W/q8_${v}_$rep.json > $W/q8_${v}_$rep.md 2>$W/q8_${v}_$rep.err; echo "q8=$v $rep rc $? $(el)"
  done
done
timeout 120 $B/qmoe bench --backend cuda --shape all --m 4096 --scheme fp8,w8a8-int8 --json $W/fp8_4096.json > $W/fp8_4096.md 2>$W/fp8_4096.err; echo "fp8 rc $? $(el)"
timeout 280 $B/test_cuda --gtest_brief=1 > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log; grep -E "^\[  FAILED" $W/test.log | head -20
cd $OUT && tar czf r1.tgz r1
