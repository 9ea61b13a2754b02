#!/usr/bin/env bash
# NOT RUN: no device machine came in three tries and the session's device time then fell below a start.
# session 36, call 4: select_sm90's token tile for the quantized-weight kernel now 64 rows up to 64
# expected rows per expert with >= 64 experts (was 128 from 49 rows). The A/B, then (so that a cut
# run still brings the A/B back) the tests of the paths it moves; the A/B at the rows the rule moves (qwen3-30b-a3b M = 1024, 64 rows
# of 128 experts): the rule against QMOE_CUDA_WQ_TN=128 (the old rule's tile there), every scheme that
# runs the kernel, alternating three times.
B=build-gpu-carry; W=$OUT/r4; mkdir -p $W
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
S=int4,int4-g32,int8,w4a8-int8,w4a8-fp8,nvfp4,nvfp4a16,mxfp4
for rep in 1 2 3; do
  for v in 128 rule; do
    if [ $v = rule ]; then unset QMOE_CUDA_WQ_TN; else export QMOE_CUDA_WQ_TN=$v; fi
    timeout 60 $B/qmoe bench --backend cuda --shape qwen3-30b-a3b --m 1024 --scheme $S --json $W/t${v}_$rep.json > $W/t${v}_$rep.md 2>$W/t${v}_$rep.err
    echo "tn $v rep $rep rc $? $(el)"
  done
done
unset QMOE_CUDA_WQ_TN
python3 bench/compare_rows.py "$W/t128_*.json" "$W/trule_*.json" > $W/compare.txt 2>&1; cat $W/compare.txt
(cd $OUT && tar czf r4.tgz r4)
# (the session's device time left for one short call: the scheme sweeps, the full-size rows and the
# quantized-weight kernel's tests, not the whole suite)
timeout 170 $B/test_cuda --gtest_brief=1 --gtest_filter='Select*:SchemeSweep*:CudaMoeFullSize.*:CudaSm90.QuantizedWeightTokenTiles:CudaSm90.FoldedGroupScales:CudaSm90.W4A8Fp8OnQgmma:CudaMoeEdges.*' > $W/gpu_tests.log 2>&1; echo "tests rc $? $(el)"
grep -E "PASSED|FAILED|passed|failed|rc " $W/gpu_tests.log | tail -10
cd $OUT && tar czf r4.tgz r4
