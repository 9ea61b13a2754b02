#!/usr/bin/env bash
# session 48, call 2 (pack of the fused top-k sum: GEMM2 of one token sums the top k itself,
# GemmParams::sum_count, no reduce launch): (a) its test, then the whole GPU suite (tests, C ABI,
# Python) at this pack, which includes SchemeSweep's int8_channel_asym at M = 4096 (256-row tiles,
# not yet run); (b) A/B of the fused sum against the reduce kernel (QMOE_CUDA_FUSED_SUM=0) at M = 1,
# every shape, three alternations; (c) the anchor bench (bf16, fp8, int4 at M = 1..4096);
# (d) issue 5's rows, in what is left of 560 s.
B=build-gpu-carry; W=$OUT/r2; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
pack() { (cd $OUT && tar czf r2.tgz r2); }
bash scripts/pack_gpu_build.sh --unpack $B > /dev/null
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv > $W/gpu.txt 2>&1; cat $W/gpu.txt
timeout 120 $B/test_cuda --gtest_filter='*TopKSumInGemm2*:*OneTokenDecodeWithoutAlign*' > $W/tests.log 2>&1; echo "tests rc $? $(el)"
grep -E "^\[  (PASSED|FAILED) |FAILED|Failure" $W/tests.log | head -20
pack
OUT=$W QMOE_GPU_PHASES="info tests capi python" timeout 260 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "suite rc $? $(el)"
grep -E "PASSED|FAILED|passed|failed|rc " $W/gpu_tests.log | tail -10
pack
for rep in 1 2 3; do
  [ $(el) -lt 430 ] || break
  for f in 1 0; do
    QMOE_CUDA_FUSED_SUM=$f timeout 40 $B/qmoe bench --backend cuda --shape all --m 1 --scheme bf16,fp8,int4,mxfp4 --json $W/ab_f${f}_$rep.json > $W/ab_f${f}_$rep.md 2>>$W/ab.err; echo "ab fused=$f rep $rep rc $? $(el)"
  done
  pack
done
[ $(el) -lt 450 ] && timeout $(( 580 - $(el) )) $B/qmoe bench --backend cuda --shape all --m 1,16,64,256,1024,4096 --scheme bf16,fp8,int4 --json $W/anchors.json > $W/anchors.md 2>$W/anchors.err; echo "bench anchors rc $? $(el)"
pack
[ $(el) -lt 500 ] && timeout $(( 585 - $(el) )) $B/qmoe bench --backend cuda --shape all --m 1,16,4096 --scheme mxfp4,nvfp4a16,nvfp4,w4a8-fp8,w4a8-int8,w8a8-int8 --json $W/i5.json > $W/i5.md 2>$W/i5.err; echo "i5 rc $? $(el)"
pack
