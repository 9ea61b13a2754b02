#!/usr/bin/env bash
# session 13, call 9: folded int4 group scales take 64-row token tiles up to 64 rows per expert
# where >= 64 experts share the layer (select_sm90, Sm90Kind::kWqFold): int4 at M = 1024 / 2048 by
# the new rule against 128-row tiles forced (QMOE_CUDA_WQ_TN=128: the old rule's choice at 49-64
# rows), two alternating repetitions; the Hopper, int sweep and selection tests.
B=build-gpu-carry; W=$OUT/r9; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
timeout 150 $B/test_cuda --gtest_brief=1 --gtest_filter='CudaSm90*:AllSchemes/SchemeSweep*int*:CudaMoeEdges.*:Select*' > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log; grep -E "^\[  FAILED" $W/test.log | head; grep -A4 "Failure" $W/test.log | head -20
for rep in 1 2; do
  for v in rule t128; do
    e=X=0; [ $v = t128 ] && e=QMOE_CUDA_WQ_TN=128
    timeout 60 env $e $B/qmoe bench --backend cuda --shape all --m 1024,2048 --scheme int4 --json $W/${v}_$rep.json > $W/${v}_$rep.md 2>$W/${v}_$rep.err; echo "$v $rep rc $? $(el)"
  done
done
cd $OUT && tar czf r9.tgz r9
