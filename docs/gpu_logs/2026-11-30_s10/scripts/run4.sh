#!/usr/bin/env bash
# session 10, call 4: every replay's time of a row (QMOE_BENCH_TRACE=1), 100+ replays without warmup:
# is the bimodal row time (r3: mixtral-8x7b M = 16 bf16 672 or 743 us) a phase within the row?
B=build-gpu-carry; W=$OUT/r4; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
export QMOE_BENCH_TRACE=1
timeout 100 $B/qmoe bench --backend cuda --shape all --m 1,16,64 --scheme bf16,fp8 --warmup 0 --iters 150 > $W/a.md 2> $W/a.trace; echo "a $(el)"
timeout 100 $B/qmoe bench --backend cuda --shape mixtral-8x7b,gpt-oss-120b --m 16,64,256,4096 --scheme bf16,fp8,int4 --warmup 0 --iters 150 > $W/b.md 2> $W/b.trace; echo "b $(el)"
cd $OUT && tar czf r4.tgz r4
