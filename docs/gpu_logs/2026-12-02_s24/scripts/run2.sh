#!/usr/bin/env bash
# session 24, call 2: why the CTA pairs were 0.66-0.90x (r1). Diagnostic builds: nomc (pairs
# coupled as in the kernel, but each CTA loads all of A itself, no multicast), ctaarr (remote
# arrivals with the default .release.cta semantics). fp8 / bf16 x mixtral-8x7b / qwen3-30b-a3b x
# M = 1024 / 4096: pairs off, pairs on, nomc, ctaarr, alternating twice.
B=build-gpu-carry; W=$OUT/r2; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }

for rep in 1 2; do
  for v in off on nomc ctaarr; do
    Q=$B/qmoe; e=QMOE_CUDA_PAIRS=1
    [ $v = off ] && e=QMOE_CUDA_PAIRS=0
    [ $v = nomc ] && Q=$B/qmoe_nomc
    [ $v = ctaarr ] && Q=$B/qmoe_ctaarr
    env $e timeout 60 $Q bench --backend cuda --shape mixtral-8x7b,qwen3-30b-a3b --m 1024,4096 --scheme fp8,bf16 --json $W/${v}_$rep.json > $W/${v}_$rep.md 2>$W/${v}_$rep.err; echo "$v $rep rc $? $(el)"
  done
done
for v in on nomc ctaarr; do python3 bench/compare_rows.py "$W/off_*.json" "$W/${v}_*.json" > $W/compare_$v.txt 2>&1; echo "== off vs $v"; grep -v '^|---' $W/compare_$v.txt | cut -c1-80; done
cd $OUT && tar czf r2.tgz r2
