#!/usr/bin/env bash
# session 34, call 5: biased int4 codes, second form (QMOE_D90_BIAS, build-time; qmoe_bias0 = the HEAD
# kernel): each warp sums its own slabs' activations after the rows are staged (no block barrier),
# 8-row M-blocks with chunks inside atoms (g32) unbiased. Decode tests (with the offset-activation
# test); A/B bias0 against bias1 at M = 1 / 16 / 64 of int4 g128 / channel / g32 on every shape, two
# alternations; the whole CUDA suite.
B=build-gpu-carry; W=$OUT/r5; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
chmod +x $B/qmoe_bias0
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv > $W/gpu.txt 2>&1
F='Select*:CudaDecode*:DecodeSweep*:DecodeFormats*:CudaSm90.OneToken*'
timeout 120 $B/test_cuda --gtest_brief=1 --gtest_filter="$F" > $W/test_decode.log 2>&1; echo "decode tests rc $? $(el)"; tail -1 $W/test_decode.log; grep -B2 -A10 "Failure" $W/test_decode.log | head -30
for rep in 1 2; do for v in bias0 bias1; do
  q=$B/qmoe; [ $v = bias0 ] && q=$B/qmoe_bias0
  timeout 90 $q bench --backend cuda --shape all --m 1,16,64 --scheme int4,int4-ch,int4-g32 --json $W/${v}_$rep.json > $W/${v}_$rep.md 2>$W/${v}_$rep.err; echo "$v rep $rep rc $? $(el)"
done; done
python3 bench/compare_rows.py "$W/bias0_*.json" "$W/bias1_*.json" > $W/compare.txt 2>&1; grep -v '^|---' $W/compare.txt | cut -c1-100
timeout 230 $B/test_cuda --gtest_brief=1 > $W/test_all.log 2>&1; echo "all tests rc $? $(el)"; tail -3 $W/test_all.log; grep -B2 -A8 "Failure" $W/test_all.log | head -30
cd $OUT && tar czf r5.tgz r5
