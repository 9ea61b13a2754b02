#!/usr/bin/env bash
# session 31, call 6: the bulk decode kernel without a block-wide barrier per item (the K-group sums
# handed to the epilogue warps through mbarriers redfull / redfree; the other warps go on): the
# selection / decode tests; A/B against HEAD's build (qmoe_head) at M = 1 / 16 / 64 of int4 / fp8 /
# MXFP4 / bf16 on every shape, two alternations.
B=build-gpu-carry; W=$OUT/r6; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
timeout 100 $B/test_cuda --gtest_brief=1 --gtest_filter='Select*:CudaDecode*:DecodeSweep*:DecodeFormats*:CudaSm90.OneToken*' > $W/test.log 2>&1; echo "tests rc $? $(el)"; tail -3 $W/test.log; grep -B2 -A8 "Failure" $W/test.log | head -30
for rep in 1 2; do for v in head new; do
  q=$B/qmoe; [ $v = head ] && q=$B/qmoe_head
  timeout 40 $q bench --backend cuda --shape all --m 1,16,64 --scheme int4,fp8,mxfp4,bf16 --json $W/${v}_$rep.json > $W/${v}_$rep.md 2>$W/${v}_$rep.err; echo "$v rep $rep rc $? $(el)"
done; done
python3 bench/compare_rows.py "$W/head_*.json" "$W/new_*.json" > $W/compare.txt 2>&1; grep -v '^|---' $W/compare.txt | cut -c1-80
cd $OUT && tar czf r6.tgz r6
