#!/usr/bin/env bash
# session 31, call 2: int4 (bf16 operands, per-chunk scales) on the bulk decode kernel with biased
# codes (128 + q as operands, (128 + z) x the chunk's sum of x subtracted at the flush): the whole
# CUDA suite; A/B against QMOE_CUDA_INT4_BIAS=0 (same build) at M = 1 / 16 / 64 of int4 (g128) /
# int4-g32 on every shape, three alternations; int4-ch (channel scales: not biased) once each as
# the control.
B=build-gpu-carry; W=$OUT/r2; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
timeout 230 $B/test_cuda --gtest_brief=1 > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log; grep -E "^\[  FAILED" $W/test.log | head -20; grep -B2 -A8 "Failure" $W/test.log | head -40
QMOE_CUDA_INT4_BIAS=0 timeout 100 $B/test_cuda --gtest_brief=1 --gtest_filter='CudaDecode*:DecodeSweep*:DecodeFormats*' > $W/test_nobias.log 2>&1; echo "decode tests without bias rc $? $(el)"; tail -2 $W/test_nobias.log
for rep in 1 2 3; do for v in off new; do
  if [ $v = off ]; then export QMOE_CUDA_INT4_BIAS=0; else unset QMOE_CUDA_INT4_BIAS; fi
  timeout 45 $B/qmoe bench --backend cuda --shape all --m 1,16,64 --scheme int4,int4-g32 --json $W/${v}_$rep.json > $W/${v}_$rep.md 2>$W/${v}_$rep.err; echo "$v rep $rep rc $? $(el)"
done; done
for v in off new; do
  if [ $v = off ]; then export QMOE_CUDA_INT4_BIAS=0; else unset QMOE_CUDA_INT4_BIAS; fi
  timeout 45 $B/qmoe bench --backend cuda --shape all --m 1,16,64 --scheme int4-ch --json $W/ch_${v}.json > $W/ch_${v}.md 2>$W/ch_${v}.err; echo "ch $v rc $? $(el)"
done
unset QMOE_CUDA_INT4_BIAS
python3 bench/compare_rows.py "$W/off_*.json" "$W/new_*.json" > $W/compare.txt 2>&1; grep -v '^|---' $W/compare.txt | cut -c1-110
python3 bench/compare_rows.py "$W/ch_off.json" "$W/ch_new.json" > $W/compare_ch.txt 2>&1; tail -3 $W/compare_ch.txt | cut -c1-110
cd $OUT && tar czf r2.tgz r2
