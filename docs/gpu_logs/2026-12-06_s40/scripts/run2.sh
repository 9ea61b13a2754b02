#!/usr/bin/env bash
# session 40, call 2 (GPU code of 6567226, unchanged since; only the CLI travels, with a variant):
# (a) the H200 anchor pass bf16/fp8/int4 x 5 shapes x M 1..4096 and issue 5's rows (M = 1, 16, 4096);
# (b) A/B of s31's lazy_scale_wait_not_measured.patch (the bulk decode kernel waits for an item's
#     column scales at its first flush, not before its first atom) against the base CLI, M = 1 / 16 /
#     64 of int4 / fp8 / MXFP4 / bf16 on every shape, two alternations.
B=build-gpu-ab; W=$OUT/r2; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
(cd $B && xz -dc both.tar.xz | tar xf -) || python3 -c 'import tarfile; tarfile.open("build-gpu-ab/both.tar.xz").extractall("build-gpu-ab")'
ls -la $B; echo "unpacked $(el)"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv > $W/gpu.txt 2>&1; cat $W/gpu.txt
timeout 150 $B/qmoe bench --backend cuda --shape all --m 1,16,64,256,1024,4096 --scheme bf16,fp8,int4 --json $W/anchors.json > $W/anchors.md 2>$W/anchors.err; echo "anchors rc $? $(el)"
grep -i geomean $W/anchors.md
(cd $OUT && tar czf r2.tgz r2)
timeout 120 $B/qmoe bench --backend cuda --shape all --m 1,16,4096 --scheme mxfp4,nvfp4a16,nvfp4,w4a8-fp8,w4a8-int8,w8a8-int8 --json $W/i5.json > $W/i5.md 2>$W/i5.err; echo "i5 rc $? $(el)"
(cd $OUT && tar czf r2.tgz r2)
for rep in 1 2; do
  for v in base lazy; do
    bin=$B/qmoe; [ $v = lazy ] && bin=$B/qmoe_lazy
    timeout 90 $bin bench --backend cuda --shape all --m 1,16,64 --scheme int4,fp8,mxfp4,bf16 --json $W/ab_${v}_$rep.json > $W/ab_${v}_$rep.md 2>$W/ab_${v}_$rep.err
    echo "ab $v $rep rc $? $(el)"
  done
  (cd $OUT && tar czf r2.tgz r2)
done
python3 bench/compare_rows.py "$W/ab_base_*.json" "$W/ab_lazy_*.json" > $W/compare_lazy.txt 2>&1; tail -25 $W/compare_lazy.txt
cd $OUT && tar czf r2.tgz r2
