#!/usr/bin/env bash
# session 34, call 3: the bulk decode kernel's mbarrier waits with try_wait's suspend-time hint
# (QMOE_MBAR_SUSPEND_NS, build-time, defined by moe_decode.cu; qmoe_hint0 = moe_decode.cu without it,
# the earlier form; the Hopper GEMMs unchanged in both). Decode tests; A/B hint0 against hint1 at
# M = 1 / 16 / 64 of int4 / MXFP4 / fp8 / bf16 on every shape, three alternations; the whole CUDA suite.
B=build-gpu-carry; W=$OUT/r3; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
chmod +x $B/qmoe_hint0
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit,temperature.gpu --format=csv > $W/gpu.txt 2>&1
F='Select*:CudaDecode*:DecodeSweep*:DecodeFormats*:CudaSm90.OneToken*'
timeout 120 $B/test_cuda --gtest_brief=1 --gtest_filter="$F" > $W/test_decode.log 2>&1; echo "decode tests rc $? $(el)"; tail -1 $W/test_decode.log; grep -B2 -A10 "Failure" $W/test_decode.log | head -30
for rep in 1 2 3; do for v in hint0 hint1; do
  q=$B/qmoe; [ $v = hint0 ] && q=$B/qmoe_hint0
  timeout 90 $q bench --backend cuda --shape all --m 1,16,64 --scheme int4,mxfp4,fp8,bf16 --json $W/${v}_$rep.json > $W/${v}_$rep.md 2>$W/${v}_$rep.err; echo "$v rep $rep rc $? $(el)"
done; done
python3 bench/compare_rows.py "$W/hint0_*.json" "$W/hint1_*.json" > $W/compare.txt 2>&1; grep -v '^|---' $W/compare.txt | cut -c1-100
timeout 250 $B/test_cuda --gtest_brief=1 > $W/test_all.log 2>&1; echo "all tests rc $? $(el)"; tail -3 $W/test_all.log; grep -B2 -A8 "Failure" $W/test_all.log | head -30
cd $OUT && tar czf r3.tgz r3
