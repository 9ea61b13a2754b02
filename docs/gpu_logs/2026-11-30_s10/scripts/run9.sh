#!/usr/bin/env bash
# session 10, call 9: plain weight copy stored 128B-swizzled, every weight box one 1-D bulk copy
# (tile kernels and the streaming kernel): Hopper tests, then A/B default / stream (everywhere).
B=build-gpu-carry; W=$OUT/r9; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
QMOE_CUDA_SYNC_CHECK=1 timeout 120 $B/test_cuda --gtest_filter='CudaSm90.*:AllSchemes/SchemeSweep.*/bf16:AllSchemes/SchemeSweep.*/fp8_*:*W8A8*:*Int8W8A8*' > $W/test_sm90.log 2>&1; echo "test rc $? $(el)"; grep -E "OK \]|FAILED|Failure" $W/test_sm90.log | head -30
R="--backend cuda --shape all --m 1,16,64,256,1024,4096 --scheme bf16,fp8"
timeout 100 $B/qmoe bench $R --json $W/def.json > $W/def.md 2>&1; echo "def rc $? $(el)"
QMOE_CUDA_STREAM=1 QMOE_CUDA_WGMMA_MIN_ROWS=1 timeout 100 $B/qmoe bench $R --json $W/st1.json > $W/st1.md 2>&1; echo "st1 rc $? $(el)"
QMOE_CUDA_STREAM=1 QMOE_CUDA_WGMMA_MIN_ROWS=1 QMOE_CUDA_STREAM_NT=64 timeout 100 $B/qmoe bench --backend cuda --shape all --m 16,64,256,1024 --scheme bf16,fp8 --json $W/st64.json > $W/st64.md 2>&1; echo "st64 rc $? $(el)"
cd $OUT && tar czf r9.tgz r9
