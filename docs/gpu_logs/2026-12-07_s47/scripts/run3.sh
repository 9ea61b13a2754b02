#!/usr/bin/env bash
# session 47, call 3: FP8 weight-only and int8 WNA16 channel on the wq kernel's 256-row token tiles (two
# 80 KiB stages) from 128 rows per expert: (a) the FP8A16 / sm90 tests (the M = 1100 case asserts the 256 tiles); (b) A/B,
# fp8-a16 and int8 (W8A16 channel) at M = 1024 / 4096, default (256 tiles) against QMOE_CUDA_WQ_TN=128, alternated while
# under 230 s; (c) int4 M = 1024 / 4096 (the int4 256-tile kernels are untouched: a control).
B=build-gpu-carry; W=$OUT/r3; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
pack() { (cd $OUT && tar czf r3.tgz r3); }
bash scripts/pack_gpu_build.sh --unpack $B > /dev/null
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv > $W/gpu.txt 2>&1; cat $W/gpu.txt
timeout 100 $B/test_cuda --gtest_filter='*fp8a16*:*Fp8WeightOnly*:*Sm90*' > $W/tests.log 2>&1; echo "tests rc $? $(el)"
grep -E "^\[  (PASSED|FAILED) |FAILED|Failure" $W/tests.log | head -20
pack
for pass in 1 2 3; do
  for tn in 0 128; do
    [ $(el) -lt 230 ] || break
    QMOE_CUDA_WQ_TN=$tn timeout 60 $B/qmoe bench --backend cuda --shape all --m 1024,4096 --scheme fp8-a16,int8 --json $W/a16_tn${tn}_p$pass.json > $W/a16_tn${tn}_p$pass.md 2>$W/a16_tn${tn}_p$pass.err; echo "bench tn=$tn pass $pass rc $? $(el)"
  done
  pack
done
timeout 40 $B/qmoe bench --backend cuda --shape all --m 1024,4096 --scheme int4 --json $W/int4.json > $W/int4.md 2>$W/int4.err; echo "bench int4 rc $? $(el)"
pack
