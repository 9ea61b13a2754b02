#!/usr/bin/env bash
# session 10, call 2: why decode rows run ~10% slower as graph replays than the sum of their
# kernels under ncu (r1: mixtral-8x7b M = 16 bf16 743 vs 665 us; gpt-oss-120b M = 64 1470 vs 1331).
# nsys per-kernel times inside the graph (if nsys is there), PDL off, clocks and power while benching.
B=build-gpu-carry; W=$OUT/r2; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
(which nsys ncu; ls /usr/local/cuda/bin | head -50; ls /opt/nvidia 2>/dev/null) > $W/tools.txt 2>&1
nvidia-smi -q -d CLOCK,POWER,PERFORMANCE > $W/smi_before.txt 2>&1
ROWS="--shape mixtral-8x7b,gpt-oss-120b,qwen3-30b-a3b --m 1,16,64 --scheme bf16,fp8"
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,clocks_throttle_reasons.active --format=csv -lms 50 > $W/smi_trace.csv 2>&1 &
SP=$!
timeout 60 $B/qmoe bench --backend cuda $ROWS --iters 20 --json $W/def.json > $W/def.md 2>&1; echo "def rc $? $(el)"
QMOE_CUDA_PDL=0 timeout 60 $B/qmoe bench --backend cuda $ROWS --iters 20 --json $W/nopdl.json > $W/nopdl.md 2>&1; echo "nopdl rc $? $(el)"
kill $SP
NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
if [ -n "$NSYS" ]; then
  for c in "mixtral-8x7b 16 bf16" "gpt-oss-120b 64 bf16" "qwen3-30b-a3b 1 bf16"; do
    set -- $c
    timeout 90 $NSYS profile --cuda-graph-trace=node -t cuda -o $W/nsys_$1_$2_$3 $B/qmoe bench --backend cuda --shape $1 --m $2 --scheme $3 --iters 5 > $W/nsys_$1_$2_$3.log 2>&1
    timeout 60 $NSYS stats --report cuda_gpu_trace --format csv -o $W/trace_$1_$2_$3 $W/nsys_$1_$2_$3.nsys-rep >> $W/nsys_$1_$2_$3.log 2>&1
    rm -f $W/nsys_$1_$2_$3.nsys-rep $W/nsys_$1_$2_$3.sqlite
    echo "nsys $c $(el)"
  done
fi
cd $OUT && tar czf r2.tgz r2
