#!/usr/bin/env bash
# session 20, call 5 (last of the session's device time): fp8 block scales by tile half (the
# Hopper tile kernel's chunked promotion), prefetched before the stage wait. qmoe_base = 96d9e48.
# The fp8 Hopper tests (prefill path, the new CudaSm90.Fp8BlockScalesByTileHalf, quant-once, gathers), then fp8-block rows
# base / new over every shape x M = 256 / 1024 / 4096 (one alternation: device time).
B=build-gpu-carry; W=$OUT/r5; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
xz -dc $B/qmoe_base.xz > $B/qmoe_base && chmod +x $B/qmoe_base; cp $B/qmoe $B/qmoe_new
timeout 90 $B/test_cuda --gtest_brief=1 --gtest_filter='CudaSm90.PrefillPath*:CudaSm90.Fp8Block*:CudaSm90.QuantOnce*:CudaSm90.Gather*:Select*:RowDiv*' > $W/test.log 2>&1; echo "test rc $? $(el)"; tail -3 $W/test.log; grep -E "^\[  FAILED" $W/test.log | head -20; grep -B2 -A10 "Failure" $W/test.log | head -30
for v in new base; do
  timeout 35 $B/qmoe_$v bench --backend cuda --shape all --m 256,1024,4096 --scheme fp8-block --settle-ms 100 --json $W/${v}_1.json > $W/${v}_1.md 2>$W/${v}_1.err; echo "$v rc $? $(el)"
done
python3 bench/compare_rows.py "$W/base_*.json" "$W/new_*.json" > $W/compare.txt 2>&1; grep -v '^|---' $W/compare.txt | cut -c1-150
cd $OUT && tar czf r5.tgz r5
