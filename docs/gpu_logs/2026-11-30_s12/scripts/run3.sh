#!/usr/bin/env bash
# session 12, call 3: as call 2, with the stage's shared-memory words loaded first (fp4 units interleaved too),
# A/B in one run against 7a71a00's binary (qmoe_base), two alternating repetitions; the Hopper tests.
B=build-gpu-carry; W=$OUT/r3; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
xz -dkf $B/qmoe_base.xz 2>/dev/null || python3 -c 'import lzma,sys; open(sys.argv[2],"wb").write(lzma.open(sys.argv[1]).read())' $B/qmoe_base.xz $B/qmoe_base; chmod +x $B/qmoe_base
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
timeout 200 $B/test_cuda --gtest_brief=1 --gtest_filter='CudaSm90*:*Select*:*Wq*:*Quant*' > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log; grep -E "^\[  FAILED" $W/test.log | head -20
for rep in 1 2; do
  for v in base new; do
    bin=$B/qmoe; [ $v = base ] && bin=$B/qmoe_base
    timeout 200 $bin bench --backend cuda --shape all --m 256,1024,4096 --scheme int4,w4a8-fp8,nvfp4a16,mxfp4,nvfp4 --json $W/${v}_$rep.json > $W/${v}_$rep.md 2>$W/${v}_$rep.err; echo "$v $rep rc $? $(el)"
  done
done
SEC="--section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section SourceCounters"
timeout 120 ncu --clock-control none -k regex:sm90_moe_wq -c 1 $SEC $B/qmoe bench --backend cuda --shape mixtral-8x7b --m 4096 --scheme int4 --iters 1 --warmup 0 --settle-ms 0 > $W/det_mixtral_4096_int4.txt 2>&1; echo "det rc $? $(el)"
cd $OUT && tar czf r3.tgz r3
