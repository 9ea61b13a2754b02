#!/usr/bin/env bash
# session 50, call 1: the pack of the wq kernel's live token columns (Sm90Gemm::live_cols: an M-block
# multiplied as far as its live rows rounded up to 32, wgmma n32 .. n256), with qmoe_smem (the same
# build plus s49's decode_arow_smem_not_run.patch, scripts/build_variant.sh) in the same pack.
# (a) the GPU suite (test_cuda incl. CudaSm90.LiveTokenColumns, C ABI, Python); (b) A/B of live_cols
# in one binary (QMOE_CUDA_WQ_LIVE_COLS=0 / 1), int4 / MXFP4 / NVFP4A16 at M = 256 / 1024 / 4096 on
# every shape, alternated; (c) A/B of the decode patch, qmoe against qmoe_smem, M = 1 / 16 / 64 of
# int4 / fp8 / MXFP4, alternated, in what is left of 585 s.
# Not run in s50 (no device); run in s51 (r1 in docs/gpu_logs/2026-12-07_s51). The pack it needs, from a build of HEAD:
#   git apply docs/gpu_logs/2026-12-07_s49/decode_arow_smem_not_run.patch
#   scripts/build_variant.sh -B build smem "" moe_decode.cu; git checkout src/cuda/moe_decode.cu
#   QMOE_PACK_EXTRA="build/var/smem/qmoe:qmoe_smem" scripts/pack_gpu_build.sh build build-gpu-carry
# then run it with carry ["build-gpu-carry"].
source scripts/gpu_run_lib.sh
gpu_run_begin build-gpu-carry r1
OUT=$W QMOE_GPU_PHASES="info tests capi python" timeout 260 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "suite rc $? $(el)"
grep -E "FAILED|passed|failed|rc " $W/gpu_tests.log | tail -8
pack
for rep in 1 2; do
  for lc in 0 1; do
    [ $(el) -lt 430 ] || break 2
    QMOE_CUDA_WQ_LIVE_COLS=$lc timeout 75 $B/qmoe bench --backend cuda --shape all --m 256,1024,4096 --scheme int4,mxfp4,nvfp4a16 --json $W/lc${lc}_$rep.json > $W/lc${lc}_$rep.md 2>>$W/lc.err; echo "lc $lc rep $rep rc $? $(el)"
  done
  pack
done
for rep in 1 2 3; do
  for v in qmoe qmoe_smem; do
    [ $(el) -lt 530 ] || break 2
    timeout 50 $B/$v bench --backend cuda --shape all --m 1,16,64 --scheme int4,fp8,mxfp4 --json $W/ab_${v}_$rep.json > $W/ab_${v}_$rep.md 2>>$W/ab.err; echo "ab $v rep $rep rc $? $(el)"
  done
  pack
done
