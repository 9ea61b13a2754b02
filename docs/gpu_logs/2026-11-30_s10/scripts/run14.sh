#!/usr/bin/env bash
# session 10, call 14: the streaming kernel reads its weight boxes with an L2 evict-first policy
# (ncu r13: token tiles re-read from DRAM, +6% bytes). Test, then A/B QMOE_CUDA_STREAM_HINT=0 / default
# on the rows the rule takes.
B=build-gpu-carry; W=$OUT/r14; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
QMOE_CUDA_SYNC_CHECK=1 timeout 60 $B/test_cuda --gtest_filter='CudaSm90.*' > $W/test.log 2>&1; echo "test rc $? $(el)"; grep -E "OK \]|FAILED|Failure|PASSED" $W/test.log | head
for h in 0 1; do
  QMOE_CUDA_STREAM_HINT=$h timeout 60 $B/qmoe bench --backend cuda --shape llama4-scout,mixtral-8x7b --m 16,64 --scheme bf16,fp8 --settle-ms 200 --json $W/a_$h.json > $W/a_$h.md 2>&1
  QMOE_CUDA_STREAM_HINT=$h timeout 60 $B/qmoe bench --backend cuda --shape deepseek-v3,gpt-oss-120b --m 256 --scheme fp8 --settle-ms 200 --json $W/b_$h.json > $W/b_$h.md 2>&1
done; echo "ab $(el)"
cd $OUT && tar czf r14.tgz r14
