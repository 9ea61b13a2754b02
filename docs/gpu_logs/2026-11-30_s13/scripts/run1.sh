#!/usr/bin/env bash
# session 13, call 1: is the group-scale promotion what slows the int4 wq kernel? int4 g128 against
# int4 channel scales (same kernel family, accumulating straight into acc) at M = 256 / 1024 / 4096,
# and a full ncu profile (stall reasons, SASS source counters) of the g128 kernel's GEMM1.
B=build-gpu-carry; W=$OUT/r1; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
for rep in 1 2; do
  for sc in int4 int4-ch; do
    timeout 90 $B/qmoe bench --backend cuda --shape all --m 256,1024,4096 --scheme $sc --json $W/${sc}_$rep.json > $W/${sc}_$rep.md 2>$W/${sc}_$rep.err; echo "$sc $rep rc $? $(el)"
  done
done
timeout 150 ncu --clock-control none -k regex:sm90_moe_wq -c 1 --set full --import-source no $B/qmoe bench --backend cuda --shape mixtral-8x7b --m 1024 --scheme int4 --iters 1 --warmup 0 --settle-ms 0 -o $W/wq_mixtral_1024 > $W/ncu_full.txt 2>&1; echo "ncu full rc $? $(el)"
timeout 60 ncu -i $W/wq_mixtral_1024.ncu-rep --page details > $W/wq_details.txt 2>&1; echo "details rc $?"
timeout 60 ncu -i $W/wq_mixtral_1024.ncu-rep --page source --print-source sass --csv > $W/wq_source.csv 2>&1; echo "source rc $? $(el)"
ls -la $W | head; cd $OUT && tar czf r1.tgz r1
