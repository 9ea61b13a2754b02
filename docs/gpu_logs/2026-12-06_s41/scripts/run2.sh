#!/usr/bin/env bash
# session 41, call 2 (same build as run1.sh, H200 if it stays): the int4 g128 rows that miss issue 4's
# ">= 4x vLLM-Triton" (M = 64-4096) under the selection overrides, no rebuild: the wq kernel's token
# tile forced to 64 / 128 / 256 (QMOE_CUDA_WQ_TN; the rule: 256 only from 192 rows per expert for
# int4, measured on H100s alone in s38 / s39) and the Hopper path from 2 rows per expert
# (QMOE_CUDA_WGMMA_MIN_ROWS=2). Two alternations of the five configurations.
B=build-gpu-carry; W=$OUT/r2; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv > $W/gpu.txt 2>&1; cat $W/gpu.txt
for rep in 1 2; do
  for cfg in base "QMOE_CUDA_WQ_TN=256" "QMOE_CUDA_WQ_TN=64" "QMOE_CUDA_WQ_TN=128" "QMOE_CUDA_WGMMA_MIN_ROWS=2"; do
    n=$(echo "$cfg" | tr '=' '_'); e=""; [ "$cfg" = base ] || e="$cfg"
    env $e timeout 150 $B/qmoe bench --backend cuda --shape all --m 64,256,1024,4096 --scheme int4 \
      --json $W/${n}_$rep.json > $W/${n}_$rep.md 2> $W/${n}_$rep.err; echo "$cfg rep $rep rc $? $(el)"
  done
done
cd $OUT && tar czf r2.tgz r2
