#!/usr/bin/env bash
# session 12, call 5: the interleaved wq kernels with the next stage's raw shared-memory words loaded
# while the current stage's wgmmas run (qmoe), against call 4's kernels (qmoe_v1: interleaved, no
# prefetch; MXFP4's fragments-first path back to one scale byte per step) and 7a71a00 (qmoe_base),
# M = 256 / 1024 / 4096, two alternating repetitions; the Hopper tests.
B=build-gpu-carry; W=$OUT/r5; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
for x in qmoe_base qmoe_v1; do
  xz -dkf $B/$x.xz 2>/dev/null || python3 -c 'import lzma,sys; open(sys.argv[2],"wb").write(lzma.open(sys.argv[1]).read())' $B/$x.xz $B/$x; chmod +x $B/$x
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
timeout 200 $B/test_cuda --gtest_brief=1 --gtest_filter='CudaSm90*:*Select*:*Wq*:*Quant*' > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -2 $W/test.log; grep -E "^\[  FAILED" $W/test.log | head -20
for rep in 1 2; do
  for v in base v1 new; do
    bin=$B/qmoe; [ $v = base ] && bin=$B/qmoe_base; [ $v = v1 ] && bin=$B/qmoe_v1
    timeout 200 $bin bench --backend cuda --shape all --m 256,1024,4096 --scheme int4,w4a8-fp8,nvfp4a16,mxfp4,nvfp4 --json $W/${v}_$rep.json > $W/${v}_$rep.md 2>$W/${v}_$rep.err; echo "$v $rep rc $? $(el)"
  done
done
cd $OUT && tar czf r5.tgz r5
