#!/usr/bin/env bash
# session 47, call 4: the rule after r3 (int8 / fp8 atoms on 256-row token tiles from 1024 rows per
# expert, config.h kWq256Rows8): (a) the sm90 / FP8A16 tests (256-row tiles asserted at M = 3100 / 2600);
# (b) fp8-a16 and int8 at M = 1024 / 4096, the rule against QMOE_CUDA_WQ_TN=128, two alternations.
B=build-gpu-carry; W=$OUT/r4; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
pack() { (cd $OUT && tar czf r4.tgz r4); }
bash scripts/pack_gpu_build.sh --unpack $B > /dev/null
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv > $W/gpu.txt 2>&1; cat $W/gpu.txt
timeout 120 $B/test_cuda --gtest_filter='*fp8a16*:*Fp8WeightOnly*:*Sm90*:*Select*' > $W/tests.log 2>&1; echo "tests rc $? $(el)"
grep -E "^\[  (PASSED|FAILED) |FAILED|Failure" $W/tests.log | head -20
pack
for pass in 1 2; do
  for tn in 0 128; do
    [ $(el) -lt 130 ] || break
    QMOE_CUDA_WQ_TN=$tn timeout 60 $B/qmoe bench --backend cuda --shape all --m 1024,4096 --scheme fp8-a16,int8 --json $W/b_tn${tn}_p$pass.json > $W/b_tn${tn}_p$pass.md 2>$W/b_tn${tn}_p$pass.err; echo "bench tn=$tn pass $pass rc $? $(el)"
  done
  pack
done
