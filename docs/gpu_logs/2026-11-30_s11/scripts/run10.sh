#!/usr/bin/env bash
# session 11, call 10: the session's last kernels and rules (fp4 on the wq kernel from 12 rows):
# the Hopper tests, and the anchor rows of every scheme for docs/perf.md.
B=build-gpu-carry; W=$OUT/r10; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
timeout 60 $B/test_cuda --gtest_brief=1 --gtest_filter='CudaSm90.*:Select*' > $W/test.log 2>&1; echo "tests rc $? $(el)"; tail -3 $W/test.log
Q="timeout 150 $B/qmoe bench --backend cuda --shape all"
$Q --m 1,16,64,256,1024,4096 --scheme bf16,fp8,int4 --json $W/bench_all.json > $W/bench_all.md 2>$W/bench_all.err; echo "all rc $? $(el)"
$Q --m 1,16,64,256,1024,4096 --scheme nvfp4a16,mxfp4,nvfp4,w4a8-fp8,w8a8-int8 --json $W/b2_all.json > $W/b2_all.md 2>$W/b2_all.err; echo "b2 rc $? $(el)"
cd $OUT && tar czf r10.tgz r10
