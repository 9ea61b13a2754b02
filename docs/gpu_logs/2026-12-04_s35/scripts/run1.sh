#!/usr/bin/env bash
# session 35, call 1: the decode kernels' items per block at one token (QMOE_CUDA_DECODE90_TILES, no
# rebuild): default (even shares of about 1-2 items over 2 blocks per SM) against 2 and 3 items per
# block, alternating, M = 1 of int4 / MXFP4 / fp8 / bf16 on every shape.
B=build-gpu-carry; W=$OUT/r1; mkdir -p $W
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv > $W/gpu.txt 2>&1
for rep in 1 2; do
  for t in 0 2 3; do
    QMOE_CUDA_DECODE90_TILES=$t timeout 150 $B/qmoe bench --backend cuda --shape all --m 1 --scheme int4,mxfp4,fp8,bf16 --json $W/t${t}_$rep.json > $W/t${t}_$rep.md 2>$W/t${t}_$rep.err
    echo "tiles $t rep $rep rc $? $(el)"
  done
done
for t in 2 3; do python3 bench/compare_rows.py "$W/t0_*.json" "$W/t${t}_*.json" > $W/compare_t$t.txt 2>&1; tail -4 $W/compare_t$t.txt; done
cd $OUT && tar czf r1.tgz r1
