#!/usr/bin/env bash
# session 10, call 12: after the review (the streaming kernel's two k-loops share one stage issue;
# the Hopper tests share their case list): Hopper tests, and the streaming kernel's rows.
B=build-gpu-carry; W=$OUT/r12; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
QMOE_CUDA_SYNC_CHECK=1 timeout 100 $B/test_cuda --gtest_filter='CudaSm90.*:SelectSm90.*:CudaMoeEdges.*' > $W/test.log 2>&1; echo "test rc $? $(el)"; grep -E "OK \]|FAILED|Failure|PASSED" $W/test.log | head -20
timeout 60 $B/qmoe bench --backend cuda --shape llama4-scout,mixtral-8x7b --m 16,64 --scheme bf16,fp8 --json $W/st_a.json > $W/st_a.md 2>&1; echo "a $(el)"
timeout 60 $B/qmoe bench --backend cuda --shape deepseek-v3,gpt-oss-120b --m 256 --scheme fp8 --json $W/st_b.json > $W/st_b.md 2>&1; echo "b $(el)"
cd $OUT && tar czf r12.tgz r12
