#!/usr/bin/env bash
# session 36, call 3: the quantized-weight wgmma kernel's token tile (select_sm90: 32 rows up to 24
# expected rows per expert, 64 up to 48, else 128) against each tile forced (QMOE_CUDA_WQ_TN=32 / 64 /
# 128), alternating three times, int4 g128 and MXFP4 at M = 256 / 1024 on every shape. The build is
# call 2's; QMOE_CUDA_FP8_QUARTERS=0 keeps its fp8 path HEAD's (the wq kernel is HEAD's code).
B=build-gpu-carry; W=$OUT/r3; mkdir -p $W
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
export QMOE_CUDA_FP8_QUARTERS=0
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv > $W/gpu.txt 2>&1
for rep in 1 2 3; do
  for v in rule 32 64 128; do
    for sc in int4 mxfp4; do
      if [ $v = rule ]; then unset QMOE_CUDA_WQ_TN; else export QMOE_CUDA_WQ_TN=$v; fi
      timeout 60 $B/qmoe bench --backend cuda --shape all --m 256,1024 --scheme $sc --json $W/t${v}_${sc}_$rep.json > $W/t${v}_${sc}_$rep.md 2>$W/t${v}_${sc}_$rep.err
      echo "tn $v $sc rep $rep rc $? $(el)"
    done
  done
done
unset QMOE_CUDA_WQ_TN
for v in 32 64 128; do python3 bench/compare_rows.py "$W/trule_*.json" "$W/t${v}_*.json" > $W/compare_t$v.txt 2>&1; echo "== rule vs $v"; grep -v "^|---" $W/compare_t$v.txt | cut -d'|' -f2-7 | tail -22; done
cd $OUT && tar czf r3.tgz r3
