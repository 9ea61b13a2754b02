#!/usr/bin/env bash
# session 41, call 4 (the build of 3755346: int4 256-row wq tiles from 128 rows per expert): the int4
# anchor rows (5 shapes x 6 M), twice, on whichever card comes.
B=build-gpu-carry; W=$OUT/r4; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv > $W/gpu.txt 2>&1; cat $W/gpu.txt
for rep in 1 2; do
  timeout 150 $B/qmoe bench --backend cuda --shape all --m 1,16,64,256,1024,4096 --scheme int4 --json $W/int4_$rep.json \
    > $W/int4_$rep.md 2> $W/int4_$rep.err; echo "int4 rep $rep rc $? $(el)"
done
cd $OUT && tar czf r4.tgz r4
