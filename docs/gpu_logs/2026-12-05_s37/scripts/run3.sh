#!/usr/bin/env bash
# NOT RUN: no device machine came in three tries; HEAD d2b59aa did not run through the GPU suite (r2 ran it with the CV path on, at 65b2c6f).
# session 37, call 3: HEAD after the CV revert and W4A8's 128-row wq tiles: the whole GPU suite, then
# on an H200 the anchor rows (bf16 / fp8 / int4 at every M) if the time allows.
B=build-gpu-carry; W=$OUT/r3; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv > $W/gpu.txt 2>&1; cat $W/gpu.txt
OUT=$W QMOE_GPU_PHASES="info tests capi python" timeout 280 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "suite rc $? $(el)"
grep -E "PASSED|FAILED|passed|failed|rc " $W/gpu_tests.log | tail -12
(cd $OUT && tar czf r3.tgz r3)
if grep -q H200 $W/gpu.txt && [ $(el) -lt 360 ]; then
  timeout $(( 560 - $(el) )) $B/qmoe bench --backend cuda --shape all --m 1,16,64,256,1024,4096 --scheme bf16,fp8,int4 --json $W/anchors.json > $W/anchors.md 2>$W/anchors.err; echo "anchor rows rc $? $(el)"
  python3 bench/perf_table.py $W/anchors.json 2>&1 | grep -E "^- " | head -12
fi
cd $OUT && tar czf r3.tgz r3
