#!/usr/bin/env bash
# session 35, call 3: where the int4 decode kernel's time goes now: HEAD against measurement builds of
# the bulk decode kernel (scripts/build_variant.sh): -DQMOE_D90_NODEQ (the raw codes as mma operands,
# no dequantization), -DQMOE_D90_NOCOMPUTE (no math: the ring, item steps and epilogue only), and
# -DQMOE_D90_ACC4 (four accumulators per column instead of two: eight mma chains per warp), alternating,
# int4 g128 at M = 1 / 16 / 64 on every shape (the measurement builds' outputs are wrong by design).
B=build-gpu-carry; W=$OUT/r3; mkdir -p $W
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }

cp $B/qmoe $B/qmoe_base
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv > $W/gpu.txt 2>&1
for rep in 1 2 3; do
  for v in base nodeq nocomp acc4; do
    timeout 120 $B/qmoe_$v bench --backend cuda --shape all --m 1,16,64 --scheme int4 --json $W/${v}_$rep.json > $W/${v}_$rep.md 2>$W/${v}_$rep.err
    echo "$v rep $rep rc $? $(el)"
  done
done
for v in nodeq nocomp acc4; do python3 bench/compare_rows.py "$W/base_*.json" "$W/${v}_*.json" > $W/compare_$v.txt 2>&1; echo "== $v"; tail -2 $W/compare_$v.txt; done
cd $OUT && tar czf r3.tgz r3
