#!/usr/bin/env bash
# session 41, call 3 (the build with int4 256-row wq tiles from 128 rows per expert, config.h
# kWq256Rows = 128): (a) the selection and wide-tile tests, then the whole GPU suite; (b) int4 g128
# rows at 128 rows per expert (mixtral-8x7b M = 512, llama4-scout / qwen3-30b-a3b M = 2048,
# deepseek-v3 / gpt-oss-120b M = 4096) and their neighbours, the rule against 128-row tiles forced
# (QMOE_CUDA_WQ_TN=128, the old rule's choice below 192 rows), three alternations.
B=build-gpu-carry; W=$OUT/r3; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv > $W/gpu.txt 2>&1; cat $W/gpu.txt
timeout 150 $B/test_cuda --gtest_filter='SelectSm90.*:CudaSm90.PersistentTileKernelMatchesOneCtaPerTile:CudaSm90.WideTokenTiles:CudaSm90.QuantizedWeightTokenTiles' > $W/rule_tests.log 2>&1; echo "rule tests rc $? $(el)"
grep -E "^\[  (PASSED|FAILED) |FAILED \]" $W/rule_tests.log | head; grep -B2 -A12 "Failure" $W/rule_tests.log | head -30
for rep in 1 2 3; do
  for cfg in rule "QMOE_CUDA_WQ_TN=128"; do
    n=$(echo "$cfg" | tr '=' '_'); e=""; [ "$cfg" = rule ] || e="$cfg"
    env $e timeout 150 $B/qmoe bench --backend cuda --shape all --m 512,2048,4096 --scheme int4 \
      --json $W/${n}_$rep.json > $W/${n}_$rep.md 2> $W/${n}_$rep.err; echo "$cfg rep $rep rc $? $(el)"
  done
done
(cd $OUT && tar czf r3.tgz r3)
OUT=$W QMOE_GPU_PHASES="info tests capi python" timeout 300 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "suite rc $? $(el)"
grep -E "PASSED|FAILED|passed|failed|rc " $W/gpu_tests.log | tail -8
cd $OUT && tar czf r3.tgz r3
