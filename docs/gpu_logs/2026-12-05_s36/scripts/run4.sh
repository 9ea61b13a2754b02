#!/usr/bin/env bash
# session 36, call 4: select_sm90's token tile for the quantized-weight kernel now 64 rows up to 64
# expected rows per expert with >= 64 experts (was 128 from 49 rows). The whole GPU suite, the C ABI
# and Python at this build; then the A/B at the rows the rule moves (qwen3-30b-a3b M = 1024, 64 rows
# of 128 experts): the rule against QMOE_CUDA_WQ_TN=128 (the old rule's tile there), every scheme that
# runs the kernel, alternating three times.
B=build-gpu-carry; W=$OUT/r4; mkdir -p $W
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
OUT=$W QMOE_GPU_PHASES="info tests capi python" timeout 330 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "gpu_tests rc $? $(el)"
grep -E "PASSED|FAILED|passed|failed|rc " $W/gpu_tests.log | tail -10
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
cd $OUT && tar czf r4.tgz r4
