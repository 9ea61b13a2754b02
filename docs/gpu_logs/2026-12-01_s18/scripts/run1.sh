#!/usr/bin/env bash
# session 18, call 1: INT8 W8A8 on 128 x 256 IGMMA tiles (Sm90Cfg kWide: one 128-byte k box per
# stage, 4 stages, wgmma m64n256k32 s8, the 16-bit loop's wait order) against the 128 x 128 form
# (qmoe_base = the same tree built with -DQMOE_SM90_I8_BN=128). The Hopper / backend II suites,
# then the A/B at M = 256 / 1024 / 4096 alternating twice, then the whole CUDA suite.
B=build-gpu-carry; W=$OUT/r1; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
xz -dc $B/qmoe_base.xz > $B/qmoe_base && chmod +x $B/qmoe_base; cp $B/qmoe $B/qmoe_new
timeout 200 $B/test_cuda --gtest_brief=1 --gtest_filter='CudaSm90.*:QSchemes/*:CudaQ*:Select*' > $W/test_sm90.log 2>&1; echo "test sm90 rc $? $(el)"; tail -2 $W/test_sm90.log; grep -E "^\[  FAILED" $W/test_sm90.log | head -20; grep -B2 -A8 "Failure" $W/test_sm90.log | head -40
for rep in 1 2; do
  for v in base new; do
    timeout 120 $B/qmoe_$v bench --backend cuda --shape all --m 256,1024,4096 --scheme w8a8-int8 --json $W/${v}_$rep.json > $W/${v}_$rep.md 2>$W/${v}_$rep.err; echo "$v $rep rc $? $(el)"
  done
done
python3 bench/compare_rows.py "$W/base_*.json" "$W/new_*.json" > $W/compare.txt 2>&1; tail -25 $W/compare.txt
timeout 250 $B/test_cuda --gtest_brief=1 > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log; grep -E "^\[  FAILED" $W/test.log | head -20
cd $OUT && tar czf r1.tgz r1
