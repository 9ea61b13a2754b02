#!/usr/bin/env bash
# session 14, call 6: the final code (GEMM1 of one token unsplit, GEMM2 splits as before): decode /
# one-token / selection tests; M = 1 rows of every scheme against qmoe_base (HEAD 070776b),
# alternating twice; then the anchor table of every scheme at every M (bf16 / fp8 / int4, backend II).
B=build-gpu-carry; W=$OUT/r6; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
xz -dc $B/qmoe_base.xz > $B/qmoe_base && chmod +x $B/qmoe_base; cp $B/qmoe $B/qmoe_new
timeout 120 $B/test_cuda --gtest_brief=1 --gtest_filter='CudaDecode*:DecodeFormats*:CudaSm90.OneToken*:Select*:CudaMoeEdges*' > $W/test_decode.log 2>&1; echo "test decode rc $? $(el)"; tail -2 $W/test_decode.log; grep -E "^\[  FAILED" $W/test_decode.log | head -20; grep -A5 "Failure" $W/test_decode.log | head -30
for rep in 1 2; do
  for v in base new; do
    timeout 100 $B/qmoe_$v bench --backend cuda --shape all --m 1 --scheme bf16,fp8,int4,nvfp4a16,mxfp4,nvfp4,w4a8-fp8,w8a8-int8 --json $W/${v}_$rep.json > $W/${v}_$rep.md 2>$W/${v}_$rep.err; echo "$v $rep rc $? $(el)"
  done
done
Q="timeout 150 $B/qmoe bench --backend cuda --shape all"
$Q --m 1,16,64,256,1024,4096 --scheme bf16,fp8,int4 --json $W/bench_all.json > $W/bench_all.md 2>$W/bench_all.err; echo "all rc $? $(el)"
$Q --m 1,16,64,256,1024,4096 --scheme nvfp4a16,mxfp4,nvfp4,w4a8-fp8,w8a8-int8 --json $W/b2_all.json > $W/b2_all.md 2>$W/b2_all.err; echo "b2 rc $? $(el)"
cd $OUT && tar czf r6.tgz r6
