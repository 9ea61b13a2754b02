#!/usr/bin/env bash
# NOT RUN (session 52: six tries got no machine, then none was lent for the rest of the session).
# session 52, call 1: the pack of main with both patches of this folder applied, in this order:
#   decode_smem_and_wq_q8_live_not_run.patch  s49's decode A rows in shared memory, and s51's W4A8 fp8
#                                             live columns with one wq kernel per tile
#   wq64_live16_not_run.patch                 live columns on 64-row tiles too, by 16 (wgmma n16 / n48 /
#                                             n32 / n64; W4A8 fp8's Q8 64-row tiles too, QGMMA k32)
#   git apply docs/gpu_logs/2026-12-08_s52/decode_smem_and_wq_q8_live_not_run.patch
#   git apply docs/gpu_logs/2026-12-08_s52/wq64_live16_not_run.patch
#   ninja -C build && scripts/pack_gpu_build.sh build build-gpu-carry      # then carry ["build-gpu-carry"]
# (a) the GPU suite (CudaSm90.LiveTokenColumns: 256- / 128- / 64-row tiles, W4A8 fp8 on 128 / 64); land the
#     first patch where it passes, the second where LiveTokenColumns' 64-row cases pass too;
# (b) A/B of live_cols in one binary (QMOE_CUDA_WQ_LIVE_COLS=0 / 1), alternated: W4A8 fp8 at M = 256 /
#     1024 / 4096 (both patches: deepseek-v3 / gpt-oss-120b M = 1024 run its 64-row tiles), int4 / MXFP4
#     / NVFP4A16 at M = 256 / 1024 (the 64-row tiles of the second: deepseek-v3 / gpt-oss-120b /
#     qwen3-30b-a3b M = 1024 ...);
# (c) A/B of the wq token tile at 32-64 rows per expert now that wider tiles multiply only their live
#     columns: the rule (32 / 64-row tiles there) against QMOE_CUDA_WQ_TN=128, int4 / MXFP4, M = 256 / 1024;
# (d) the anchor rows of every scheme at M = 1 .. 4096, most wanted first.
# LIM (default 575) is the call's seconds: the later steps start only while there is time for them.
source scripts/gpu_run_lib.sh
LIM=${LIM:-575}
gpu_run_begin build-gpu-carry r1
gpu_run_suite 260
for rep in 1 2; do
  for lc in 0 1; do
    [ $(el) -lt $((LIM - 200)) ] || break 2
    QMOE_CUDA_WQ_LIVE_COLS=$lc timeout 45 $B/qmoe bench --backend cuda --shape all --m 256,1024,4096 --scheme w4a8-fp8 --json $W/q8lc${lc}_$rep.json > $W/q8lc${lc}_$rep.md 2>>$W/lc.err; echo "q8 lc $lc rep $rep rc $? $(el)"
    QMOE_CUDA_WQ_LIVE_COLS=$lc timeout 60 $B/qmoe bench --backend cuda --shape all --m 256,1024 --scheme int4,mxfp4,nvfp4a16 --json $W/lc${lc}_$rep.json > $W/lc${lc}_$rep.md 2>>$W/lc.err; echo "lc $lc rep $rep rc $? $(el)"
  done
  pack
done
for tn in 0 128; do
  [ $(el) -lt $((LIM - 120)) ] || break
  QMOE_CUDA_WQ_TN=$tn timeout 40 $B/qmoe bench --backend cuda --shape all --m 256,1024 --scheme int4,mxfp4 --json $W/tn${tn}.json > $W/tn${tn}.md 2>>$W/tn.err; echo "tn $tn rc $? $(el)"
done
pack
for sc in int4 w4a8-fp8 mxfp4 nvfp4a16 fp8 bf16 w8a8-int8 nvfp4 w4a8-int8 int8; do
  [ $(el) -lt $((LIM - 45)) ] || break
  timeout $((LIM - $(el))) $B/qmoe bench --backend cuda --shape all --m 1,16,64,256,1024,4096 --scheme $sc --json $W/anch_$sc.json > $W/anch_$sc.md 2>>$W/anch.err; echo "anchors $sc rc $? $(el)"
  pack
done
