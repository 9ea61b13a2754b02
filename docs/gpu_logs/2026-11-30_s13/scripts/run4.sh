#!/usr/bin/env bash
# session 13, call 4: the wq kernel's one-CTA direct-accumulation kernels (int4 folded / channel,
# int8 channel; 128-row token tiles) keep a stage's wgmmas in flight (wait_group 1, two fragment
# sets) against 409b79b (qmoe_base: wait_group 0 per stage), two alternating repetitions; the
# Hopper tests and the int sweeps.
B=build-gpu-carry; W=$OUT/r4; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
xz -dkf $B/qmoe_base.xz 2>/dev/null || python3 -c 'import lzma,sys; open(sys.argv[2],"wb").write(lzma.open(sys.argv[1]).read())' $B/qmoe_base.xz $B/qmoe_base; chmod +x $B/qmoe_base
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
timeout 150 $B/test_cuda --gtest_brief=1 --gtest_filter='CudaSm90*:AllSchemes/SchemeSweep*int*:CudaMoeEdges.Many*' > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log; grep -E "^\[  FAILED" $W/test.log | head -20; grep -A4 "Failure" $W/test.log | head -30
for rep in 1 2; do
  for v in base new; do
    bin=$B/qmoe; [ $v = base ] && bin=$B/qmoe_base
    timeout 90 $bin bench --backend cuda --shape all --m 256,1024,4096 --scheme int4,int4-ch,int8 --json $W/${v}_$rep.json > $W/${v}_$rep.md 2>$W/${v}_$rep.err; echo "$v $rep rc $? $(el)"
  done
done
cd $OUT && tar czf r4.tgz r4
