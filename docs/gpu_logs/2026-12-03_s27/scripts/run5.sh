#!/usr/bin/env bash
# session 27, call 5 (the last ~170 s of device time): the final rule (a third ring stage only where
# blocks walk several items and no per-chunk scales are staged). Decode tests; qwen3-30b-a3b fp8 /
# int4 / int8 at M = 1 / 16 / 64, QMOE_CUDA_DECODE90_BALANCE 0 / 1 once each.
B=build-gpu-carry; W=$OUT/r5; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
Q=$B/qmoe
timeout 20 $B/test_cuda --gtest_brief=1 --gtest_filter='Select*:CudaDecode*:DecodeFormats/*' > $W/test_first.log 2>&1; rc=$?; echo "decode tests rc $rc $(el)"; tail -2 $W/test_first.log; grep -B2 -A8 "Failure" $W/test_first.log | head -20
for v in 0 1; do
  QMOE_CUDA_DECODE90_BALANCE=$v timeout 14 $Q bench --backend cuda --shape qwen3-30b-a3b --m 1,16,64 --scheme fp8,int4,int8 --settle-ms 100 --json $W/q${v}.json > $W/q${v}.md 2>$W/q${v}.err; echo "q$v rc $? $(el)"
done
python3 bench/compare_rows.py "$W/q0.json" "$W/q1.json" 2>&1 | grep -v '^|---' | cut -c1-100
cd $OUT && tar czf r5.tgz r5
