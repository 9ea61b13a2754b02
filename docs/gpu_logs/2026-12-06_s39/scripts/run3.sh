#!/usr/bin/env bash
# session 39, call 2 (on the H200 that call 1 left warm): the anchor rows at 701861a's GPU code
# (s38's 256-row int4 rule) for bf16 / fp8 / int4 at every M, then run2.sh (ncu of the wq kernel) in
# the time left.
B=build-gpu-carry; W=$OUT/r3; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv > $W/gpu.txt 2>&1
timeout 280 $B/qmoe bench --backend cuda --shape all --m 1,16,64,256,1024,4096 --scheme bf16,fp8,int4 --json $W/anchors.json > $W/anchors.md 2>$W/anchors.err; echo "anchor rows rc $? $(el)"
python3 bench/perf_table.py $W/anchors.json 2>&1 | grep -E "^- " | head -12
(cd $OUT && tar czf r3.tgz r3)
timeout $(( 575 - $(el) )) bash build-gpu-carry/run2.sh; echo "run2 rc $? $(el)"
cd $OUT && tar czf r3.tgz r3 $( [ -d r2 ] && echo r2 )
