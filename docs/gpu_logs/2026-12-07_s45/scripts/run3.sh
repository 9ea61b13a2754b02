#!/usr/bin/env bash
# session 45, call 3: FP8 weight-only (tensor / channel scales) on the Hopper wq kernel at prefill
# sizes: (a) its tests (the sweeps, CudaSm90.Fp8WeightOnlyOnTheWqKernelAndOffIt, the NaN test), then every
# fp8 / sm90 / decode test (device time was short for the whole suite); (b) fp8-a16 rows with the wq
# kernel (default) and without (QMOE_CUDA_FP8A16_WGMMA=0),
# alternated, and W8A8 fp8 for reference.
B=build-gpu-carry; W=$OUT/r3; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
bash scripts/pack_gpu_build.sh --unpack $B > /dev/null
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv > $W/gpu.txt 2>&1; cat $W/gpu.txt
timeout 120 $B/test_cuda --gtest_filter='*fp8a16*:*Fp8WeightOnly*:CudaLayer.RefusesLoudly' > $W/a16_tests.log 2>&1; echo "a16 tests rc $? $(el)"
grep -E "^\[  (PASSED|FAILED) |FAILED|Failure" $W/a16_tests.log | head -20
(cd $OUT && tar czf r3.tgz r3)
timeout 150 $B/test_cuda --gtest_filter='*fp8*:*Fp8*:*FP8*:*Sm90*:*Decode*' > $W/fp8_suite.log 2>&1; echo "fp8 / sm90 / decode tests rc $? $(el)"
grep -E "^\[  (PASSED|FAILED) |FAILED|Failure" $W/fp8_suite.log | head -20
(cd $OUT && tar czf r3.tgz r3)
for i in 1 2; do
  timeout 60 $B/qmoe bench --backend cuda --shape all --m 256,4096 --scheme fp8-a16 --json $W/wq_$i.json > $W/wq_$i.md 2>/dev/null
  QMOE_CUDA_FP8A16_WGMMA=0 timeout 60 $B/qmoe bench --backend cuda --shape all --m 256,4096 --scheme fp8-a16 --json $W/mma_$i.json > $W/mma_$i.md 2>/dev/null
  echo "bench pass $i $(el)"
done
timeout 60 $B/qmoe bench --backend cuda --shape all --m 256,4096 --scheme fp8 --json $W/fp8.json > $W/fp8.md 2>/dev/null; echo "fp8 $(el)"
cd $OUT && tar czf r3.tgz r3
