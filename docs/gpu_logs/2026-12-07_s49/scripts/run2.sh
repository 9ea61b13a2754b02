#!/usr/bin/env bash
# session 49, call 2: A/B of the decode epilogue change (6c0af0c: the tokens' A rows read in the
# epilogue, not kept live through the K loops; int4 16-row kernel spills 100 / 152 -> 68 / 128 bytes)
# against ab41521's moe_decode.cu, both CLIs built by scripts/build_variant.sh from the same build
# (build-ab/pack.tar.xz: qmoe_base, qmoe_new); M = 1 / 16 / 64 / 256 of int4 / fp8 / MXFP4 on every
# shape, alternated while under 270 s.
source scripts/gpu_run_lib.sh
gpu_run_begin build-ab r2
for rep in 1 2 3; do
  for v in base new; do
    [ $(el) -lt 270 ] || break 2
    timeout 60 $B/qmoe_$v bench --backend cuda --shape all --m 1,16,64,256 --scheme int4,fp8,mxfp4 --json $W/ab_${v}_$rep.json > $W/ab_${v}_$rep.md 2>>$W/ab.err; echo "ab $v rep $rep rc $? $(el)"
  done
  pack
done
