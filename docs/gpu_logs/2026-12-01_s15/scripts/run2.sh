#!/usr/bin/env bash
# session 15, call 2: where the time of a decode layer goes. A -DQMOE_D90_TRACE build of HEAD
# records per block of the bulk decode kernel (last replay of each bench row) the times of its
# phases (bench/d90_trace.py); rows: M = 1 of int4 / MXFP4 / bf16 / fp8 and M = 16 of int4. Then the
# ring depth at M = 1 / 16 (QMOE_CUDA_DECODE90_STAGES = 2 / 4, one binary, alternating).
B=build-gpu-carry; W=$OUT/r2; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
xz -dc $B/qmoe_trace.xz > $B/qmoe_trace && chmod +x $B/qmoe_trace
QMOE_D90_TRACE_FILE=$W/trace_m1.txt timeout 60 $B/qmoe_trace bench --backend cuda --shape all --m 1 --scheme int4,mxfp4,bf16,fp8 --json $W/trace_m1.json > $W/trace_m1.md 2>&1; echo "trace m1 rc $? $(el)"
QMOE_D90_TRACE_FILE=$W/trace_m16.txt timeout 60 $B/qmoe_trace bench --backend cuda --shape all --m 16 --scheme int4,mxfp4 --json $W/trace_m16.json > $W/trace_m16.md 2>&1; echo "trace m16 rc $? $(el)"
python3 bench/d90_trace.py $W/trace_m1.txt $W/trace_m16.txt > $W/trace_summary.txt 2>&1; echo "summary rc $? $(el)"
for rep in 1 2; do
  for st in 2 4; do
    QMOE_CUDA_DECODE90_STAGES=$st timeout 60 $B/qmoe bench --backend cuda --shape all --m 1,16 --scheme int4,mxfp4,nvfp4a16 --json $W/st${st}_$rep.json > $W/st${st}_$rep.md 2>&1; echo "stages $st $rep rc $? $(el)"
  done
done
cd $OUT && tar czf r2.tgz r2
