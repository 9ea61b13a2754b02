#!/usr/bin/env bash
# session 33, call 4: the balanced fill rule narrowed to 4-bit weights, per-item cost 16 k-tiles
# (after r3): selection / decode tests; A/B 0 against 1 at M = 1 of int4 / MXFP4 / fp8 / bf16 on
# every shape, two alternations (expected: llama4-scout's 4-bit rows as r3, everything else unchanged).
B=build-gpu-carry; W=$OUT/r4; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
F='Select*:CudaDecode*:DecodeSweep*:DecodeFormats*:CudaSm90.OneToken*'
timeout 90 $B/test_cuda --gtest_brief=1 --gtest_filter="$F" > $W/test.log 2>&1; echo "tests rc $? $(el)"; tail -1 $W/test.log; grep -B2 -A8 "Failure" $W/test.log | head -30
for rep in 1 2; do for v in off on; do
  e=0; [ $v = on ] && e=1
  QMOE_CUDA_FILL_BALANCE=$e timeout 45 $B/qmoe bench --backend cuda --shape all --m 1 --scheme int4,mxfp4,fp8,bf16 --json $W/${v}_$rep.json > $W/${v}_$rep.md 2>$W/${v}_$rep.err; echo "$v rep $rep rc $? $(el)"
done; done
python3 bench/compare_rows.py "$W/off_*.json" "$W/on_*.json" > $W/compare.txt 2>&1; grep -v '^|---' $W/compare.txt | cut -c1-100
grep -h "llama4-scout | 1 \|gpt-oss-120b | 1 " $W/on_1.md | grep -o "gemm1=.*" | sort | uniq | head
cd $OUT && tar czf r4.tgz r4
