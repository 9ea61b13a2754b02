#!/usr/bin/env bash
# session 13, call 8: the wq kernel's token tile with folded group scales (64-row fold tiles now run
# two CTAs per SM): int4 at M = 256 / 1024 / 4096 with QMOE_CUDA_WQ_TN = 32 / 64 / 128 forced against
# select_sm90's choice, same binary (f416d5c), one run.
B=build-gpu-carry; W=$OUT/r8; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
for rep in 1 2; do
  for tn in rule 32 64 128; do
    e=X=0; [ $tn != rule ] && e=QMOE_CUDA_WQ_TN=$tn
    timeout 60 env $e $B/qmoe bench --backend cuda --shape all --m 256,1024,4096 --scheme int4 --json $W/${tn}_$rep.json > $W/${tn}_$rep.md 2>$W/${tn}_$rep.err; echo "$tn $rep rc $? $(el)"
  done
done
cd $OUT && tar czf r8.tgz r8
