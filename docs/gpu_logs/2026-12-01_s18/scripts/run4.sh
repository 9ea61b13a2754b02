#!/usr/bin/env bash
# session 18, call 4: GEMM2's epilogue on the Hopper tile kernel (bf16 / fp8 / INT8) through a
# shared-memory staging tile and one bulk copy (cp.async.bulk shared -> global) per slot row,
# against the direct fp32 stores (qmoe_base: the same tree built with -DQMOE_SM90_EPI_STORES).
# The Hopper / sweep suites (new), the decode sweep (INT8's decode at 2-3 rows), then the A/B at
# M = 256 / 1024 / 4096 alternating twice.
B=build-gpu-carry; W=$OUT/r4; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
xz -dc $B/qmoe_base.xz > $B/qmoe_base && chmod +x $B/qmoe_base; cp $B/qmoe $B/qmoe_new
timeout 250 $B/test_cuda --gtest_brief=1 --gtest_filter='CudaSm90.*:QSchemes/*:CudaQ*:Select*:AllSchemes/*:DecodeFormats/*:CudaMoeEdges*' > $W/test_sm90.log 2>&1; echo "tests rc $? $(el)"; tail -2 $W/test_sm90.log; grep -E "^\[  FAILED" $W/test_sm90.log | head -20; grep -B2 -A8 "Failure" $W/test_sm90.log | head -60
for rep in 1 2; do
  for v in base new; do
    timeout 150 $B/qmoe_$v bench --backend cuda --shape all --m 256,1024,4096 --scheme bf16,fp8,w8a8-int8 --json $W/${v}_$rep.json > $W/${v}_$rep.md 2>$W/${v}_$rep.err; echo "$v $rep rc $? $(el)"
  done
done
python3 bench/compare_rows.py "$W/base_*.json" "$W/new_*.json" > $W/compare.txt 2>&1; cat $W/compare.txt | grep -v '^|---' | cut -c1-150
cd $OUT && tar czf r4.tgz r4
