#!/usr/bin/env bash
# session 30, call 2: where a one-token layer's time goes now (after the twenty-seventh session's
# decode plan and the twenty-eighth's h quantization in GEMM2): a -DQMOE_D90_TRACE build of HEAD
# (the committed kernels) records per block of the bulk decode kernel its phases (bench/d90_trace.py)
# for M = 1 of int4 / MXFP4 / bf16 / fp8 on every shape and M = 16 of int4 / fp8; the normal binary's
# (layer times of the normal build: r1 and the twenty-ninth session).
B=build-gpu-carry; W=$OUT/r2; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
xz -dc $B/qmoe_trace.xz > $B/qmoe_trace && chmod +x $B/qmoe_trace
QMOE_D90_TRACE_FILE=$W/trace_m1.txt timeout 90 $B/qmoe_trace bench --backend cuda --shape all --m 1 --scheme int4,mxfp4,bf16,fp8 --json $W/trace_m1.json > $W/trace_m1.md 2>&1; echo "trace m1 rc $? $(el)"
QMOE_D90_TRACE_FILE=$W/trace_m16.txt timeout 90 $B/qmoe_trace bench --backend cuda --shape all --m 16 --scheme int4,fp8 --json $W/trace_m16.json > $W/trace_m16.md 2>&1; echo "trace m16 rc $? $(el)"
python3 bench/d90_trace.py $W/trace_m1.txt $W/trace_m16.txt > $W/trace_summary.txt 2>&1; echo "summary rc $? $(el)"
# (the normal binary did not fit the 64 MiB transfer beside the trace build: layer times from r1 and s29)
head -c 6000 $W/trace_summary.txt
cd $OUT && tar czf r2.tgz r2
