#!/usr/bin/env bash
# session 10, call 5: the replay sequence with the host synchronizing after every replay (as until
# now) against all replays queued at once (QMOE_BENCH_QUEUE=1): is the slow first phase of the decode
# rows (r4) the host's launch latency inside the timed region?
B=build-gpu-carry; W=$OUT/r5; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
export QMOE_BENCH_TRACE=1
R="--backend cuda --shape all --m 1,16,64 --scheme bf16,fp8 --warmup 0 --iters 100"
QMOE_BENCH_QUEUE=1 timeout 100 $B/qmoe bench $R > $W/q.md 2> $W/q.trace; echo "q $(el)"
timeout 100 $B/qmoe bench $R > $W/s.md 2> $W/s.trace; echo "s $(el)"
QMOE_BENCH_QUEUE=1 timeout 100 $B/qmoe bench --backend cuda --shape mixtral-8x7b,qwen3-30b-a3b --m 4096 --scheme bf16,fp8 --warmup 0 --iters 300 > $W/q4096.md 2> $W/q4096.trace; echo "q4096 $(el)"
cd $OUT && tar czf r5.tgz r5
