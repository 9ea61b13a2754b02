#!/usr/bin/env bash
# NOT RUN (no device came for it). session 51, call 2: the pack at the commit where the wq kernel's 128- / 256-row tiles always run one
# K-loop copy per count of token columns (live columns the default, QMOE_CUDA_WQ_LIVE_COLS=0 counting
# whole / half tiles only; no separate LIVE kernels), extended to W4A8 fp8 on QGMMA (Sm90Gemm::q8:
# wgmma n32 / n96 of 128 e4m3, promotions over the multiplied columns only), with the decode kernel's
# A rows staged in shared memory (s49's patch).
# (a) the GPU suite (incl. CudaSm90.LiveTokenColumns with the W4A8 cases); (b) A/B of live_cols on
# W4A8 fp8 in one binary (QMOE_CUDA_WQ_LIVE_COLS=0 / 1), M = 256 / 1024 / 4096, every shape,
# alternated; (c) the anchor rows of every scheme at M = 1 .. 4096, in what is left of 280 s (device time was short after failed starts).
source scripts/gpu_run_lib.sh
gpu_run_begin build-gpu-carry r2
OUT=$W QMOE_GPU_PHASES="info tests capi python" timeout 260 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "suite rc $? $(el)"
grep -E "FAILED|passed|failed|rc " $W/gpu_tests.log | tail -8
pack
for rep in 1 2; do  # (a second rep only where time is left)
  for lc in 0 1; do
    [ $(el) -lt 225 ] || break 2
    QMOE_CUDA_WQ_LIVE_COLS=$lc timeout 40 $B/qmoe bench --backend cuda --shape all --m 256,1024,4096 --scheme w4a8-fp8 --json $W/q8lc${lc}_$rep.json > $W/q8lc${lc}_$rep.md 2>>$W/lc.err; echo "q8 lc $lc rep $rep rc $? $(el)"
  done
  pack
done
for sc in int4 mxfp4 nvfp4a16 nvfp4 w4a8-fp8 w4a8-int8 int8 bf16 fp8 w8a8-int8; do
  [ $(el) -lt 240 ] || break
  timeout 60 $B/qmoe bench --backend cuda --shape all --m 1,16,64,256,1024,4096 --scheme $sc --json $W/anch_$sc.json > $W/anch_$sc.md 2>>$W/anch.err; echo "anchors $sc rc $? $(el)"
  pack
done
