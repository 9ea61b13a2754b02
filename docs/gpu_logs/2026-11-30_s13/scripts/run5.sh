#!/usr/bin/env bash
# session 13, call 5: the wq kernel's 64-row token tiles with direct accumulation (int4 folded /
# channel, fp4 units) on one CTA per SM (interleaved k16 steps, raw words prefetched) instead of two
# (fragments first), qmoe, against 409b79b (qmoe_base), M = 1024 / 2048, two alternating repetitions.
B=build-gpu-carry; W=$OUT/r5; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
xz -dkf $B/qmoe_base.xz 2>/dev/null || python3 -c 'import lzma,sys; open(sys.argv[2],"wb").write(lzma.open(sys.argv[1]).read())' $B/qmoe_base.xz $B/qmoe_base; chmod +x $B/qmoe_base
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
for rep in 1 2; do
  for v in base new; do
    bin=$B/qmoe; [ $v = base ] && bin=$B/qmoe_base
    timeout 90 $bin bench --backend cuda --shape all --m 1024,2048 --scheme int4,nvfp4a16,mxfp4,nvfp4 --json $W/${v}_$rep.json > $W/${v}_$rep.md 2>$W/${v}_$rep.err; echo "$v $rep rc $? $(el)"
  done
done
cd $OUT && tar czf r5.tgz r5
