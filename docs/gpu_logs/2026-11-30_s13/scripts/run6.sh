#!/usr/bin/env bash
# session 13, call 6: decode K splits at M = 1 (one token: top_k M-blocks, few (M-block, tile) items
# per block, so one wave's blocks carry unequal item counts): GEMM2 forced to 2 / 3 / 4 / 6 / 8
# splits and GEMM1 to 2 / 3 / 4 (QMOE_CUDA_DECODE_SPLIT1 / _SPLIT2, only above the rule's), every
# shape, bf16 / int4 / fp8 / mxfp4.
B=build-gpu-carry; W=$OUT/r6; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
run() { timeout 60 env "$@" $B/qmoe bench --backend cuda --shape all --m 1 --scheme bf16,int4,fp8,mxfp4 --json $W/$tag.json > $W/$tag.md 2>$W/$tag.err; echo "$tag rc $? $(el)"; }
tag=base run X=0
for s2 in 2 3 4 6 8; do tag=s2_$s2 run QMOE_CUDA_DECODE_SPLIT2=$s2; done
for s1 in 2 3 4; do tag=s1_$s1 run QMOE_CUDA_DECODE_SPLIT1=$s1; done
tag=base2 run X=0
cd $OUT && tar czf r6.tgz r6
