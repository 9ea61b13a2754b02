#!/usr/bin/env bash
# session 17, call 4: the wq kernel family after r3's ncu (Q8: 322 warp instructions per stage, the
# atoms read by generic LD.E.128 because align_1024 lost the shared address space, ~40 instructions
# of 64-bit scale-index arithmetic per stage): the shared stages as shared pointers, the rows' scale
# / zero-point columns hoisted. The Hopper suites, then qmoe (new) against qmoe_base (e8f0a0d) on the
# wq schemes at M = 256 / 1024 / 4096, alternating twice; then the whole suite.
B=build-gpu-carry; W=$OUT/r4; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
xz -dc $B/qmoe_base.xz > $B/qmoe_base && chmod +x $B/qmoe_base; cp $B/qmoe $B/qmoe_new
timeout 200 $B/test_cuda --gtest_brief=1 --gtest_filter='CudaSm90.*:Sm90KPerm*:Select*:CudaQ*' > $W/test_sm90.log 2>&1; echo "test sm90 rc $? $(el)"; tail -2 $W/test_sm90.log; grep -E "^\[  FAILED" $W/test_sm90.log | head -20; grep -B2 -A8 "Failure" $W/test_sm90.log | head -40
for rep in 1 2; do
  for v in base new; do
    timeout 150 $B/qmoe_$v bench --backend cuda --shape all --m 256,1024,4096 --scheme int4,mxfp4,nvfp4a16,w4a8-fp8 --json $W/${v}_$rep.json > $W/${v}_$rep.md 2>$W/${v}_$rep.err; echo "$v $rep rc $? $(el)"
  done
done
timeout 250 $B/test_cuda --gtest_brief=1 > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log; grep -E "^\[  FAILED" $W/test.log | head -20
cd $OUT && tar czf r4.tgz r4
