#!/usr/bin/env bash
# session 10, call 6: the anchor benches with the settled method (300 ms of untimed replays before
# each row's timed ones, and before each ceiling); 1500 ms on a subset to check that 300 suffice.
B=build-gpu-carry; W=$OUT/r6; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
timeout 150 $B/qmoe bench --backend cuda --shape all --m 1,16,64,256,1024,4096 --scheme bf16,fp8,int4 --json $W/bench_all.json > $W/bench_all.md 2>$W/bench_all.err; echo "bench_all rc $? $(el)"
timeout 150 $B/qmoe bench --backend cuda --shape mixtral-8x7b,qwen3-30b-a3b,deepseek-v3 --m 16,4096 --scheme bf16,fp8 --settle-ms 1500 --json $W/long.json > $W/long.md 2>$W/long.err; echo "long rc $? $(el)"
timeout 200 $B/qmoe bench --backend cuda --shape all --m 1,16,64,256,1024,4096 --scheme nvfp4a16,mxfp4,nvfp4,w4a8-fp8,w8a8-int8 --json $W/b2_all.json > $W/b2_all.md 2>$W/b2_all.err; echo "b2 rc $? $(el)"
cd $OUT && tar czf r6.tgz r6
