#!/usr/bin/env bash
# session 47, call 1: (a) the FP8 weight-only wq-kernel test after f8e3b62/f471d59's fix for the stale
# ring slots past K, opt-in QMOE_CUDA_FP8A16_WGMMA off and on; (b) the whole GPU suite (tests, C ABI,
# Python) with the opt-in on, the evidence for making it the default; (c) the anchor bench
# (bf16, fp8, int4 at M = 1..4096) and fp8-a16 with the opt-in on, in what is left of 480 s.
B=build-gpu-carry; W=$OUT/r1; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
pack() { (cd $OUT && tar czf r1.tgz r1); }
bash scripts/pack_gpu_build.sh --unpack $B > /dev/null
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv > $W/gpu.txt 2>&1; cat $W/gpu.txt
timeout 100 $B/test_cuda --gtest_filter='*fp8a16*:*Fp8WeightOnly*:*Sm90*' > $W/tests.log 2>&1; echo "tests rc $? $(el)"
grep -E "^\[  (PASSED|FAILED) |FAILED|Failure" $W/tests.log | head -20
QMOE_CUDA_FP8A16_WGMMA=1 timeout 60 $B/test_cuda --gtest_filter='*fp8a16*:*Fp8WeightOnly*' > $W/tests_on.log 2>&1; echo "tests (opt-in on) rc $? $(el)"
grep -E "^\[  (PASSED|FAILED) |FAILED|Failure" $W/tests_on.log | head -20
pack
QMOE_CUDA_FP8A16_WGMMA=1 OUT=$W QMOE_GPU_PHASES="info tests capi python" timeout 260 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "suite rc $? $(el)"
grep -E "PASSED|FAILED|passed|failed|rc " $W/gpu_tests.log | tail -10
pack
[ $(el) -lt 330 ] && QMOE_CUDA_FP8A16_WGMMA=1 timeout 30 $B/qmoe bench --backend cuda --shape all --m 256,1024,4096 --scheme fp8-a16 --json $W/a16.json > $W/a16.md 2>$W/a16.err; echo "bench a16 rc $? $(el)"
pack
[ $(el) -lt 360 ] && timeout $(( 480 - $(el) )) $B/qmoe bench --backend cuda --shape all --m 1,16,64,256,1024,4096 --scheme bf16,fp8,int4 --json $W/anchors.json > $W/anchors.md 2>$W/anchors.err; echo "bench anchors rc $? $(el)"
pack
