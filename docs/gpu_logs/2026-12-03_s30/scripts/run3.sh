#!/usr/bin/env bash
# session 30, call 3: the top-k sum with its slot-row loads in flight together (moe_kernels.cu
# reduce_kernel): the whole CUDA suite; A/B against the committed build (qmoe_base) at M = 1 / 16 of
# bf16 / fp8 / int4 / MXFP4 on every shape, three alternations, and M = 256 / 4096 of bf16 / int4 once.
B=build-gpu-carry; W=$OUT/r3; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
timeout 260 $B/test_cuda --gtest_brief=1 > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log; grep -E "^\[  FAILED" $W/test.log | head -20; grep -B2 -A8 "Failure" $W/test.log | head -30
for rep in 1 2 3; do for v in base new; do
  q=$B/qmoe; [ $v = base ] && q=$B/qmoe_base
  timeout 60 $q bench --backend cuda --shape all --m 1,16 --scheme bf16,fp8,int4,mxfp4 --json $W/${v}_$rep.json > $W/${v}_$rep.md 2>$W/${v}_$rep.err; echo "$v rep $rep rc $? $(el)"
done; done
for v in base new; do
  q=$B/qmoe; [ $v = base ] && q=$B/qmoe_base
  timeout 90 $q bench --backend cuda --shape all --m 256,4096 --scheme bf16,int4 --json $W/big_${v}.json > $W/big_${v}.md 2>$W/big_${v}.err; echo "big $v rc $? $(el)"
done
python3 bench/compare_rows.py "$W/base_*.json" "$W/new_*.json" > $W/compare.txt 2>&1; grep -v '^|---' $W/compare.txt | cut -c1-110
python3 bench/compare_rows.py "$W/big_base.json" "$W/big_new.json" > $W/compare_big.txt 2>&1; grep -v '^|---' $W/compare_big.txt | cut -c1-110
cd $OUT && tar czf r3.tgz r3
