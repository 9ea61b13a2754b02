#!/usr/bin/env bash
# session 10, call 8: the streaming GEMM's weight stream without math (gpu_ceiling ring2): 1-D
# bulk vs 2-D TMA boxes, one vs two streams per CTA, one vs two CTAs per SM.
B=build-gpu-carry; W=$OUT/r8; mkdir -p $W
timeout 60 $B/qmoe_gpu_ceiling ring2 > $W/ring2.md 2>&1; echo "ring2 rc $?"; cat $W/ring2.md
cd $OUT && tar czf r8.tgz r8
