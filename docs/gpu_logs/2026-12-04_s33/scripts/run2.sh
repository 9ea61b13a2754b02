#!/usr/bin/env bash
# session 33, call 2 (1e2f19d + pack script): the anchor rows with the bulk decode kernel's tiled
# scales on (bf16 / fp8 / int4 / W8A8-int8 at every M; int4-g32, MXFP4 / NVFP4A16 / W4A8-fp8 /
# W4A8-int8 decode rows), then the C ABI and Python phases of scripts/gpu_tests.sh.
B=build-gpu-carry; W=$OUT/r2; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv > $W/gpu.txt 2>&1
timeout 220 $B/qmoe bench --backend cuda --shape all --m 1,16,64,256,1024,4096 --scheme bf16,fp8,int4,w8a8-int8 --json $W/anchors.json > $W/anchors.md 2>$W/anchors.err; echo "anchor rows rc $? $(el)"
python3 bench/perf_table.py $W/anchors.json 2>&1 | grep -E "^- " | head -12
timeout 120 $B/qmoe bench --backend cuda --shape all --m 1,16,64 --scheme int4-g32,mxfp4,nvfp4a16,w4a8-fp8,w4a8-int8 --json $W/fp4.json > $W/fp4.md 2>$W/fp4.err; echo "decode rows rc $? $(el)"
grep -E "^\|" $W/fp4.md | grep -E "\| (1|16) \|" | cut -c1-120 | head -60
OUT=$W QMOE_GPU_PHASES="capi python" timeout 90 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "capi/python rc $? $(el)"; grep -E "passed|failed|PASSED|FAILED|rc " $W/gpu_tests.log | tail -6
cd $OUT && tar czf r2.tgz r2
