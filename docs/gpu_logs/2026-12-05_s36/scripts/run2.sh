#!/usr/bin/env bash
# session 36, call 2: fp8 W8 tiles (per-channel weights, one scale pair for all of K, 128 x 256) as
# four pipelined n64 QGMMA quarters with A from registers (ldmatrix once per stage; Sm90Gemm::fp8_quarters, QMOE_CUDA_FP8_QUARTERS, on in this build)
# (call 1 had A from shared memory: 0.96-0.98x at M >= 1024) against two n128 halves (QMOE_CUDA_FP8_QUARTERS=0, HEAD's form). First the whole GPU suite (among it
# CudaSm90.Fp8WideTilesMatchNarrow: quarters bit-identical to halves), the C ABI and Python; then the
# A/B alternating three times, fp8 at M = 64 / 256 / 1024 / 4096 on every shape.
B=build-gpu-carry; W=$OUT/r2; mkdir -p $W
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
OUT=$W QMOE_GPU_PHASES="info tests capi python" timeout 330 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "gpu_tests rc $? $(el)"
grep -E "PASSED|FAILED|passed|failed|rc " $W/gpu_tests.log | tail -10
for rep in 1 2 3; do
  for v in 0 1; do
    QMOE_CUDA_FP8_QUARTERS=$v timeout 60 $B/qmoe bench --backend cuda --shape all --m 64,256,1024,4096 --scheme fp8 --json $W/q${v}_$rep.json > $W/q${v}_$rep.md 2>$W/q${v}_$rep.err
    echo "q$v rep $rep rc $? $(el)"
  done
done
python3 bench/compare_rows.py "$W/q0_*.json" "$W/q1_*.json" > $W/compare_q.txt 2>&1; tail -24 $W/compare_q.txt
cd $OUT && tar czf r2.tgz r2
