#!/usr/bin/env bash
# session 8, call 10 (final): align on one block by default; the failing sequences with and without the grid path; final benches
B=build-gpu-carry; W=$OUT/r10; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
timeout 40 $B/test_cuda --gtest_filter='CudaAlign*:CudaSm90*:CudaMoeEdges*' --gtest_brief=1 > $W/test.log 2>&1; echo "tests rc $? $(el)"; tail -2 $W/test.log
P="--backend cuda --shape all --m 256,1024,4096 --scheme bf16,fp8,int4"
Q="--backend cuda --shape all --m 256,1024,4096 --scheme mxfp4,nvfp4,w4a8-fp8,w8a8-int8"
for r in 1 2 3; do
  QMOE_CUDA_SYNC_CHECK=1 timeout 40 $B/qmoe bench $Q > /dev/null 2>$W/sq_$r.err; echo "one-block Q $r rc $? $(el) $(grep -c bench: $W/sq_$r.err) rows; $(tail -n 1 $W/sq_$r.err | cut -c1-90)"
done
QMOE_CUDA_ALIGN_GRID=1 QMOE_CUDA_SYNC_CHECK=1 timeout 40 $B/qmoe bench $Q > /dev/null 2>$W/gq.err; echo "grid Q rc $? $(el) $(grep -c bench: $W/gq.err) rows; $(tail -n 1 $W/gq.err | cut -c1-90)"
timeout 90 $B/qmoe bench --backend cuda --shape all --m 1,16,64,256,1024,4096 --scheme bf16,fp8,int4 --json $W/bench_all.json > $W/bench_all.md 2>$W/bench_all.err; echo "bench_all rc $? $(el)"
timeout 90 $B/qmoe bench --backend cuda --shape all --m 1,16,64,256,1024,4096 --scheme nvfp4a16,mxfp4,nvfp4,w4a8-fp8,w8a8-int8 --json $W/b2_all.json > $W/b2_all.md 2>$W/b2_all.err; echo "b2 rc $? $(el)"
timeout 30 $B/qmoe bench $P > /dev/null 2>$W/p.err; echo "P rc $? $(el) $(grep -c bench: $W/p.err) rows"
(dmesg 2>&1 | grep -i "xid\|nvrm" | tail -20) > $W/dmesg.txt
cd $OUT && tar czf r10.tgz r10
