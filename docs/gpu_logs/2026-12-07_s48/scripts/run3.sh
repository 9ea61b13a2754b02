#!/usr/bin/env bash
# session 48, call 3 (pack of c93ffe8: the fused top-k sum reverted, the kernels of fcd2b4b):
# (a) the decode / sm90 / selection tests; (b) the anchor bench (bf16, fp8, int4 at M = 1..4096),
# to confirm that the decode rows r2 lost (qwen3-30b-a3b fp8 M = 16 / 64 0.77x, 4-bit M = 16 0.90-0.96x
# against s47) come back with the reverted kernel; (c) issue 5's rows.
B=build-gpu-carry; W=$OUT/r3; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
pack() { (cd $OUT && tar czf r3.tgz r3); }
bash scripts/pack_gpu_build.sh --unpack $B > /dev/null
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv > $W/gpu.txt 2>&1; cat $W/gpu.txt
timeout 120 $B/test_cuda --gtest_filter='*Decode*:*Sm90*:*Select*' > $W/tests.log 2>&1; echo "tests rc $? $(el)"
grep -E "^\[  (PASSED|FAILED) |FAILED|Failure" $W/tests.log | head -20
pack
timeout 150 $B/qmoe bench --backend cuda --shape all --m 1,16,64,256,1024,4096 --scheme bf16,fp8,int4 --json $W/anchors.json > $W/anchors.md 2>$W/anchors.err; echo "bench anchors rc $? $(el)"
pack
[ $(el) -lt 300 ] && timeout $(( 420 - $(el) )) $B/qmoe bench --backend cuda --shape all --m 1,16,4096 --scheme mxfp4,nvfp4a16,nvfp4,w4a8-fp8,w4a8-int8,w8a8-int8 --json $W/i5.json > $W/i5.md 2>$W/i5.err; echo "i5 rc $? $(el)"
pack
