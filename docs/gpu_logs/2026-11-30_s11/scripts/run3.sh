#!/usr/bin/env bash
# session 11, call 3: the align offsets kernel's coalesced fill, fp8 activations quantized once per
# token (default on; QMOE_CUDA_QUANT_ONCE=0 the per-slot rows) and GEMM2's fp32 reductions into
# token rows (QMOE_CUDA_RED=1, off by default): full CUDA tests, then A/B benches in one process
# order that alternates the variants.
B=build-gpu-carry; W=$OUT/r3; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
timeout 240 $B/test_cuda --gtest_brief=1 > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log; grep -E "FAILED|Failure" $W/test.log | head -5
Q="timeout 60 $B/qmoe bench --backend cuda --shape all"
$Q --m 1,16,64,256,1024,4096 --scheme bf16,fp8,int4 --json $W/all.json > $W/all.md 2>$W/all.err; echo "all rc $? $(el)"
for rep in 1 2; do
  QMOE_CUDA_QUANT_ONCE=0 $Q --m 256,1024,4096 --scheme fp8 --json $W/q0_$rep.json > $W/q0_$rep.md 2>&1; echo "q0 rc $? $(el)"
  $Q --m 256,1024,4096 --scheme fp8 --json $W/q1_$rep.json > $W/q1_$rep.md 2>&1; echo "q1 rc $? $(el)"
  QMOE_CUDA_RED=1 $Q --m 256,1024,4096 --scheme bf16,fp8,w8a8-int8 --json $W/red_$rep.json > $W/red_$rep.md 2>&1; echo "red rc $? $(el)"
  $Q --m 256,1024,4096 --scheme bf16,fp8,w8a8-int8 --json $W/nored_$rep.json > $W/nored_$rep.md 2>&1; echo "nored rc $? $(el)"
done
NCU="ncu --clock-control none -k regex:align_|sm90_moe|sm90_gather|reduce_ -c 9 --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum"
for c in "qwen3-30b-a3b 4096 fp8" "deepseek-v3 4096 fp8"; do
  set -- $c
  QMOE_CUDA_RED=1 timeout 60 $NCU $B/qmoe bench --backend cuda --shape $1 --m $2 --scheme $3 --iters 1 --warmup 0 --settle-ms 0 > $W/ncu_red_$1_$2_$3.txt 2>&1; echo "ncu $c rc $? $(el)"
done
cd $OUT && tar czf r3.tgz r3
