#!/usr/bin/env bash
# session 46, call 1: FP8 weight-only on the Hopper wq kernel (opt-in QMOE_CUDA_FP8A16_WGMMA=1, written
# in s45, never run): (a) its test, the FP8A16 sweeps and the sm90 tests; (b) bench fp8-a16 at M = 256, 1024, 4096 on
# the anchor shapes with the opt-in off and on, alternated twice (the second pass while under 110 s),
# and W8A8 fp8 for reference; (c) the whole GPU suite in what is left of 190 s.
B=build-gpu-carry; W=$OUT/r1; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
bash scripts/pack_gpu_build.sh --unpack $B > /dev/null
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv > $W/gpu.txt 2>&1; cat $W/gpu.txt
timeout 100 $B/test_cuda --gtest_filter='*fp8a16*:*Fp8WeightOnly*:*Sm90*' > $W/tests.log 2>&1; echo "tests rc $? $(el)"
grep -E "^\[  (PASSED|FAILED) |FAILED|Failure" $W/tests.log | head -20
QMOE_CUDA_FP8A16_WGMMA=1 timeout 60 $B/test_cuda --gtest_filter='*fp8a16*:*Fp8WeightOnly*' > $W/tests_on.log 2>&1; echo "tests (opt-in on) rc $? $(el)"
grep -E "^\[  (PASSED|FAILED) |FAILED|Failure" $W/tests_on.log | head -20
(cd $OUT && tar czf r1.tgz r1)
for pass in 1 2; do
  for on in 0 1; do
    [ $(el) -lt 110 ] || break
    QMOE_CUDA_FP8A16_WGMMA=$on timeout 45 $B/qmoe bench --backend cuda --shape all --m 256,1024,4096 --scheme fp8-a16 --json $W/a16_on${on}_p$pass.json > $W/a16_on${on}_p$pass.md 2>$W/a16_on${on}_p$pass.err; echo "bench on=$on pass $pass rc $? $(el)"
  done
  (cd $OUT && tar czf r1.tgz r1)
done
[ $(el) -lt 140 ] && timeout 30 $B/qmoe bench --backend cuda --shape all --m 256,1024,4096 --scheme fp8 --json $W/fp8.json > $W/fp8.md 2>$W/fp8.err; echo "bench fp8 rc $? $(el)"
(cd $OUT && tar czf r1.tgz r1)
OUT=$W QMOE_GPU_PHASES="info tests capi" timeout $(( 190 - $(el) )) bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "suite rc $? $(el)"
grep -E "PASSED|FAILED|passed|failed|rc " $W/gpu_tests.log | tail -8
cd $OUT && tar czf r1.tgz r1
