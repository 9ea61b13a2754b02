#!/usr/bin/env bash
# session 12, call 8: half token tiles for fp4 units on 128-row tiles too (with the interleaved
# kernel; qmoe) against b49a814 (qmoe_base, the same kernels as 85d64da), fp4 rows M = 256 / 1024 /
# 4096, two alternating repetitions; the Hopper tests and the fp4 sweeps.
B=build-gpu-carry; W=$OUT/r8; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
xz -dkf $B/qmoe_base.xz 2>/dev/null || python3 -c 'import lzma,sys; open(sys.argv[2],"wb").write(lzma.open(sys.argv[1]).read())' $B/qmoe_base.xz $B/qmoe_base; chmod +x $B/qmoe_base
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
timeout 60 $B/test_cuda --gtest_brief=1 --gtest_filter='CudaSm90*:AllSchemes/SchemeSweep*fp4*:CudaQ*' > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log; grep -E "^\[  FAILED" $W/test.log | head -20
for rep in 1 2; do
  for v in base new; do
    bin=$B/qmoe; [ $v = base ] && bin=$B/qmoe_base
    timeout 60 $bin bench --backend cuda --shape all --m 256,1024,4096 --scheme nvfp4a16,mxfp4,nvfp4 --json $W/${v}_$rep.json > $W/${v}_$rep.md 2>$W/${v}_$rep.err; echo "$v $rep rc $? $(el)"
  done
done
cd $OUT && tar czf r8.tgz r8
