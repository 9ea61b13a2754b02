#!/usr/bin/env bash
# session 47, call 2 (pack of e7e23fc, FP8 weight-only on the wq kernel by default): (a) the FP8A16 /
# sm90 tests with the default (the NaN-code test's new wq-kernel assertion); (b) the anchor bench
# (bf16, fp8, int4 at M = 1..4096) and fp8-a16 (the default path now); (c) issue 5's rows.
B=build-gpu-carry; W=$OUT/r2; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
pack() { (cd $OUT && tar czf r2.tgz r2); }
bash scripts/pack_gpu_build.sh --unpack $B > /dev/null
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv > $W/gpu.txt 2>&1; cat $W/gpu.txt
timeout 100 $B/test_cuda --gtest_filter='*fp8a16*:*Fp8WeightOnly*:*Sm90*' > $W/tests.log 2>&1; echo "tests rc $? $(el)"
grep -E "^\[  (PASSED|FAILED) |FAILED|Failure" $W/tests.log | head -20
pack
timeout 150 $B/qmoe bench --backend cuda --shape all --m 1,16,64,256,1024,4096 --scheme bf16,fp8,int4 --json $W/anchors.json > $W/anchors.md 2>$W/anchors.err; echo "bench anchors rc $? $(el)"
pack
timeout 60 $B/qmoe bench --backend cuda --shape all --m 1,16,256,1024,4096 --scheme fp8-a16 --json $W/a16.json > $W/a16.md 2>$W/a16.err; echo "bench a16 rc $? $(el)"
pack
timeout 150 $B/qmoe bench --backend cuda --shape all --m 1,16,4096 --scheme mxfp4,nvfp4a16,nvfp4,w4a8-fp8,w4a8-int8,w8a8-int8 --json $W/i5.json > $W/i5.md 2>$W/i5.err; echo "i5 rc $? $(el)"
pack
