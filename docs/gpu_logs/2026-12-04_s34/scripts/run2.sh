#!/usr/bin/env bash
# session 34, call 2: one "full" barrier per consumer warp's slab in the bulk decode kernel's ring
# (QMOE_D90_SLAB_BARS, build-time; qmoe_slab0 = the earlier one barrier per stage). Decode /
# selection tests; A/B slab0 against slab1 at M = 1 / 16 of int4 / MXFP4 / fp8 / bf16 on every shape,
# two alternations, and slab1 with a 4-stage ring (QMOE_CUDA_DECODE90_STAGES=4) once; the whole CUDA
# suite, C ABI.
B=build-gpu-carry; W=$OUT/r2; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
export LD_LIBRARY_PATH="$PWD/$B:$LD_LIBRARY_PATH"
chmod +x $B/qmoe_slab0
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit,temperature.gpu --format=csv > $W/gpu.txt 2>&1
F='Select*:CudaDecode*:DecodeSweep*:DecodeFormats*:CudaSm90.OneToken*'
timeout 150 $B/test_cuda --gtest_brief=1 --gtest_filter="$F" > $W/test_decode.log 2>&1; echo "decode tests rc $? $(el)"; tail -1 $W/test_decode.log; grep -B2 -A10 "Failure" $W/test_decode.log | head -40
for rep in 1 2; do for v in slab0 slab1; do
  q=$B/qmoe; [ $v = slab0 ] && q=$B/qmoe_slab0
  timeout 90 $q bench --backend cuda --shape all --m 1,16 --scheme int4,mxfp4,fp8,bf16 --json $W/${v}_$rep.json > $W/${v}_$rep.md 2>$W/${v}_$rep.err; echo "$v rep $rep rc $? $(el)"
done; done
QMOE_CUDA_DECODE90_STAGES=4 timeout 90 $B/qmoe bench --backend cuda --shape all --m 1,16 --scheme int4,mxfp4,fp8,bf16 --json $W/st4_1.json > $W/st4_1.md 2>$W/st4_1.err; echo "st4 rc $? $(el)"
python3 bench/compare_rows.py "$W/slab0_*.json" "$W/slab1_*.json" > $W/compare.txt 2>&1; grep -v '^|---' $W/compare.txt | cut -c1-100
python3 bench/compare_rows.py "$W/slab1_*.json" "$W/st4_*.json" > $W/compare_st4.txt 2>&1; tail -1 $W/compare_st4.txt
timeout 250 $B/test_cuda --gtest_brief=1 > $W/test_all.log 2>&1; echo "all tests rc $? $(el)"; tail -3 $W/test_all.log; grep -B2 -A8 "Failure" $W/test_all.log | head -30
timeout 60 $B/test_c_api > $W/test_c_api.log 2>&1; echo "c api rc $? $(el)"; tail -2 $W/test_c_api.log
cd $OUT && tar czf r2.tgz r2
