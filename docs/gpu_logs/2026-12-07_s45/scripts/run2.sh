#!/usr/bin/env bash
# session 45, call 2: FP8 weight-only (FP8A16) on the CUDA backend (mma.sync / decode kernels, bf16
# operands for bf16 models): (a) its tests first (the scheme / decode sweeps, the NaN-code test, the
# refusal test) and `qmoe verify` of generated ct-fp8-a16 checkpoints, then the whole GPU suite (fp8 weight decode changed for every fp8 kernel);
# (b) bench rows fp8-a16 against fp8 (W8A8) on the anchor shapes.
B=build-gpu-carry; W=$OUT/r2; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
bash scripts/pack_gpu_build.sh --unpack $B > /dev/null
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv > $W/gpu.txt 2>&1; cat $W/gpu.txt
timeout 200 $B/test_cuda --gtest_filter='*fp8a16*:*Fp8WeightOnly*:CudaLayer.RefusesLoudly' > $W/a16_tests.log 2>&1; echo "a16 tests rc $? $(el)"
grep -E "^\[  (PASSED|FAILED) |FAILED|Failure" $W/a16_tests.log | head -20
for a in mixtral llama4; do $B/qmoe gen --arch $a --format ct-fp8-a16 --out /tmp/ga16-$a > /dev/null && $B/qmoe verify /tmp/ga16-$a; done > $W/verify_a16.log 2>&1; echo "verify rc $?"; tail -3 $W/verify_a16.log
(cd $OUT && tar czf r2.tgz r2)
OUT=$W QMOE_GPU_PHASES="info tests capi python" timeout 240 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "suite rc $? $(el)"
grep -E "PASSED|FAILED|passed|failed|rc " $W/gpu_tests.log | tail -8
(cd $OUT && tar czf r2.tgz r2)
timeout $(( 380 - $(el) )) $B/qmoe bench --backend cuda --shape all --m 1,16,256,4096 --scheme fp8-a16,fp8 --json $W/a16.json > $W/a16.md 2>$W/a16.err; echo "bench rc $? $(el)"
cd $OUT && tar czf r2.tgz r2
