#!/usr/bin/env bash
# session 33, call 7: a K-split GEMM2's output zeroed by the bulk-kernel GEMM1 (GemmParams::zero_out)
# instead of a memset node before the layer (switch QMOE_CUDA_O_BY_GEMM1, 0 = the memset). Decode /
# selection tests with the switch on and off; A/B 0 against 1, M = 1 / 16 of int4 / MXFP4 / fp8 /
# bf16 on every shape (split GEMM2: llama4-scout and mixtral-8x7b M = 1, the 4-bit M = 16 rows of
# both; the rest are the control), two alternations; then the whole CUDA suite.
B=build-gpu-carry; W=$OUT/r7; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
F='Select*:CudaDecode*:DecodeSweep*:DecodeFormats*:CudaSm90.OneToken*'
for v in 1 0; do
  QMOE_CUDA_O_BY_GEMM1=$v timeout 90 $B/test_cuda --gtest_brief=1 --gtest_filter="$F" > $W/test_$v.log 2>&1; echo "tests $v rc $? $(el)"; tail -1 $W/test_$v.log; grep -B2 -A8 "Failure" $W/test_$v.log | head -30
done
for rep in 1 2; do for v in off on; do
  e=0; [ $v = on ] && e=1
  QMOE_CUDA_O_BY_GEMM1=$e timeout 45 $B/qmoe bench --backend cuda --shape all --m 1,16 --scheme int4,mxfp4,fp8,bf16 --json $W/${v}_$rep.json > $W/${v}_$rep.md 2>$W/${v}_$rep.err; echo "$v rep $rep rc $? $(el)"
done; done
python3 bench/compare_rows.py "$W/off_*.json" "$W/on_*.json" > $W/compare.txt 2>&1; grep -v '^|---' $W/compare.txt | cut -c1-100
timeout 200 $B/test_cuda --gtest_brief=1 > $W/test_all.log 2>&1; echo "all tests rc $? $(el)"; tail -3 $W/test_all.log; grep -B2 -A8 "Failure" $W/test_all.log | head -30
cd $OUT && tar czf r7.tgz r7
