#!/usr/bin/env bash
# session 32, call 1: the bulk decode kernel waits for an item's column scales only before its first
# flush (lazy_scale_wait patch of s31); selection / decode tests; A/B against HEAD's build (qmoe_head)
# at M = 1 / 16 of int4 (g128) / int4-g32 / int8 (channel) / w4a8-fp8 on every shape, three times.
B=build-gpu-carry; W=$OUT/r1; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.limit,temperature.gpu --format=csv > $W/gpu.txt 2>&1
timeout 60 $B/test_cuda --gtest_brief=1 --gtest_filter='Select*:CudaDecode*:DecodeSweep*:DecodeFormats*:CudaSm90.OneToken*' > $W/test.log 2>&1; echo "tests rc $? $(el)"; tail -2 $W/test.log; grep -B2 -A8 "Failure" $W/test.log | head -20
for rep in 1 2 3; do for v in head new; do
  q=$B/qmoe; [ $v = head ] && q=$B/qmoe_head
  timeout 40 $q bench --backend cuda --shape all --m 1,16 --scheme int4,int4-g32,int8,w4a8-fp8 --json $W/${v}_$rep.json > $W/${v}_$rep.md 2>$W/${v}_$rep.err; echo "$v rep $rep rc $? $(el)"
done; done
python3 bench/compare_rows.py "$W/head_*.json" "$W/new_*.json" > $W/compare.txt 2>&1; grep -v '^|---' $W/compare.txt | cut -c1-90
cd $OUT && tar czf r1.tgz r1
