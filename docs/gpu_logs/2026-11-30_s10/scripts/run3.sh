#!/usr/bin/env bash
# session 10, call 3: does a bench row's time depend on the rows before it in the process?
# (r1 --shape all: mixtral-8x7b M = 16 bf16 743 us; r2 three shapes: 672 us)
B=build-gpu-carry; W=$OUT/r3; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
Q="--backend cuda --m 1,16,64 --scheme bf16"
timeout 60 $B/qmoe bench $Q --shape mixtral-8x7b,gpt-oss-120b > $W/a_two.md 2>&1; echo "a $(el)"
timeout 60 $B/qmoe bench $Q --shape all > $W/b_all.md 2>&1; echo "b $(el)"
timeout 60 $B/qmoe bench $Q --shape gpt-oss-120b,deepseek-v3,qwen3-30b-a3b,mixtral-8x7b,llama4-scout > $W/c_rev.md 2>&1; echo "c $(el)"
timeout 60 $B/qmoe bench $Q --shape llama4-scout,mixtral-8x7b > $W/d_l4mix.md 2>&1; echo "d $(el)"
timeout 60 $B/qmoe bench --backend cuda --m 1,16,64 --scheme int4,bf16 --shape llama4-scout,mixtral-8x7b > $W/e_l4mix_int4.md 2>&1; echo "e $(el)"
for sh in llama4-scout mixtral-8x7b qwen3-30b-a3b deepseek-v3 gpt-oss-120b; do
  timeout 60 $B/qmoe bench $Q --shape $sh > $W/f_$sh.md 2>&1
done; echo "f $(el)"
timeout 60 $B/qmoe bench $Q --shape all --iters 30 --warmup 10 > $W/g_all_warm.md 2>&1; echo "g $(el)"
cd $W && for f in *.md; do echo "== $f"; grep -E "^\| [a-z]" $f | awk -F'|' '{printf "%s %s %s %s\n",$2,$3,$4,$6}'; done > summary.txt
cd $OUT && tar czf r3.tgz r3
