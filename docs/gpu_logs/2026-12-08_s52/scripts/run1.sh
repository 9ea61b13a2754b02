#!/usr/bin/env bash
# NOT RUN (session 52: six tries got no machine, then none was lent for the rest of the session).
# session 52, call 1: the pack with both of s51's unrun patches applied: s49's decode A rows in shared
# memory, and s51's W4A8 fp8 live columns with one wq kernel per tile (QMOE_CUDA_WQ_LIVE_COLS=0 counting
# whole / half tiles only, in the same kernel).
# (a) the GPU suite (incl. CudaSm90.LiveTokenColumns with the W4A8 cases); (b) A/B of live_cols on
# W4A8 fp8 in one binary (QMOE_CUDA_WQ_LIVE_COLS=0 / 1), M = 256 / 1024 / 4096, every shape, alternated;
# (c) A/B of the wq token tile at 32-64 rows per expert now that 128-row tiles multiply only their live
# columns: default (32 / 64-row tiles there) against QMOE_CUDA_WQ_TN=128, int4 / MXFP4 at M = 256 / 1024;
# (d) the anchor rows of every scheme at M = 1 .. 4096, most wanted first, in what is left of 570 s.
# LIM (default 575) is the call's seconds: the later steps start only while there is time for them.
# The pack, from a build of main with docs/gpu_logs/2026-12-08_s52/decode_smem_and_wq_q8_live_not_run.patch
# applied (git apply; both patches in one, refreshed for main):
#   ninja -C build && scripts/pack_gpu_build.sh build build-gpu-carry
# then run it with carry ["build-gpu-carry"]; land the patch where (a) passes.
source scripts/gpu_run_lib.sh
LIM=${LIM:-575}
gpu_run_begin build-gpu-carry r1
OUT=$W QMOE_GPU_PHASES="info tests capi python" timeout 260 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "suite rc $? $(el)"
grep -E "FAILED|passed|failed|rc " $W/gpu_tests.log | tail -8
pack
for rep in 1 2; do
  for lc in 0 1; do
    [ $(el) -lt $((LIM - 215)) ] || break 2
    QMOE_CUDA_WQ_LIVE_COLS=$lc timeout 45 $B/qmoe bench --backend cuda --shape all --m 256,1024,4096 --scheme w4a8-fp8 --json $W/q8lc${lc}_$rep.json > $W/q8lc${lc}_$rep.md 2>>$W/lc.err; echo "q8 lc $lc rep $rep rc $? $(el)"
  done
  pack
done
for rep in 1 2; do
  for tn in 0 128; do
    [ $(el) -lt $((LIM - 155)) ] || break 2
    QMOE_CUDA_WQ_TN=$tn timeout 40 $B/qmoe bench --backend cuda --shape all --m 256,1024 --scheme int4,mxfp4 --json $W/tn${tn}_$rep.json > $W/tn${tn}_$rep.md 2>>$W/tn.err; echo "tn $tn rep $rep rc $? $(el)"
  done
  pack
done
for sc in int4 w4a8-fp8 mxfp4 nvfp4a16 fp8 bf16 w8a8-int8 nvfp4 w4a8-int8 int8; do
  [ $(el) -lt $((LIM - 45)) ] || break
  timeout $((LIM - $(el))) $B/qmoe bench --backend cuda --shape all --m 1,16,64,256,1024,4096 --scheme $sc --json $W/anch_$sc.json > $W/anch_$sc.md 2>>$W/anch.err; echo "anchors $sc rc $? $(el)"
  pack
done
