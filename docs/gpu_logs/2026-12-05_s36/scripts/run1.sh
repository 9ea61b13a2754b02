#!/usr/bin/env bash
# session 36, call 1: fp8 W8 tiles (per-channel weights, one scale pair for all of K) as four pipelined
# n64 quarters (the build qmoe, compiled with QMOE_SM90_W8_QUARTERS 1) against HEAD's two n128 halves (the
# variant qmoe_head, built with -DQMOE_SM90_W8_QUARTERS=0), alternating four times, fp8 at
# M = 64 / 256 / 1024 / 4096 on every shape. (Only the two CLIs travel: the tracked tree is 44 MB of
# the 64 MiB; the tests run in the next call.)
B=build-gpu-carry; W=$OUT/r1; mkdir -p $W
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
chmod +x $B/qmoe_head
cp $B/qmoe $B/qmoe_new
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv > $W/gpu.txt 2>&1
for rep in 1 2 3 4; do
  for v in head new; do
    timeout 100 $B/qmoe_$v bench --backend cuda --shape all --m 64,256,1024,4096 --scheme fp8 --json $W/${v}_$rep.json > $W/${v}_$rep.md 2>$W/${v}_$rep.err
    echo "$v rep $rep rc $? $(el)"
  done
done
python3 bench/compare_rows.py "$W/head_*.json" "$W/new_*.json" > $W/compare_new.txt 2>&1; tail -25 $W/compare_new.txt
cd $OUT && tar czf r1.tgz r1
