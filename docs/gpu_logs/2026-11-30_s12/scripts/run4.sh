#!/usr/bin/env bash
# session 12, call 4: (a) the two-CTA wq kernels (32-row tiles; 64-row tiles with channel scales or
# fp4 units) with their k16 steps in two halves of four (dequantize 4, issue 4; qmoe_v2) against the
# fragments-first order (qmoe) and 7a71a00 (qmoe_base), M = 64 / 256; (b) the token-tile choice
# re-measured with the interleaved 1-CTA kernels (QMOE_CUDA_WQ_TN=32 / 64 / 128 vs select_sm90's)
# at M = 256 / 1024; the Hopper tests.
B=build-gpu-carry; W=$OUT/r4; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
for x in qmoe_base qmoe_v2; do
  xz -dkf $B/$x.xz 2>/dev/null || python3 -c 'import lzma,sys; open(sys.argv[2],"wb").write(lzma.open(sys.argv[1]).read())' $B/$x.xz $B/$x; chmod +x $B/$x
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
timeout 200 $B/test_cuda --gtest_brief=1 --gtest_filter='CudaSm90*:*Select*:*Wq*:*Quant*' > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -2 $W/test.log; grep -E "^\[  FAILED" $W/test.log | head -20
for rep in 1 2; do
  for v in base new v2; do
    bin=$B/qmoe; [ $v = base ] && bin=$B/qmoe_base; [ $v = v2 ] && bin=$B/qmoe_v2
    timeout 200 $bin bench --backend cuda --shape all --m 64,256 --scheme int4,w4a8-fp8,nvfp4a16,mxfp4 --json $W/${v}_$rep.json > $W/${v}_$rep.md 2>$W/${v}_$rep.err; echo "$v $rep rc $? $(el)"
  done
done
for tn in 32 64 128; do
  QMOE_CUDA_WQ_TN=$tn timeout 200 $B/qmoe bench --backend cuda --shape all --m 256,1024 --scheme int4,mxfp4 --json $W/tn${tn}.json > $W/tn${tn}.md 2>$W/tn${tn}.err; echo "tn $tn rc $? $(el)"
done
timeout 200 $B/qmoe bench --backend cuda --shape all --m 256,1024 --scheme int4,mxfp4 --json $W/tnsel.json > $W/tnsel.md 2>$W/tnsel.err; echo "tn sel rc $? $(el)"
cd $OUT && tar czf r4.tgz r4
