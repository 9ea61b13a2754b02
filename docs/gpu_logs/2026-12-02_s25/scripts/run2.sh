#!/usr/bin/env bash
# session 25, call 2: what bounds the fp8 128 x 128 tile (r1: pipelined promotion 1.00x, tensor
# activity unchanged at 56-62%). Measurement builds (wrong results, timing only): probe1 = the
# producer loads no B (half the shared-memory fill and L2 bytes), probe2 = the consumers issue no
# QGMMA (data movement and barriers alone). fp8 x every shape x M = 1024 / 4096, alternating
# twice. Then ncu stall sampling (WarpStateStats + SourceCounters, per-SASS-instruction CSV) of
# the base fp8 and bf16 kernels on mixtral-8x7b M = 4096.
B=build-gpu-carry; W=$OUT/r2; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.limit,temperature.gpu --format=csv > $W/gpu.txt 2>&1
for rep in 1 2; do
  for v in base probe1 probe2; do
    timeout 60 $B/qmoe_$v bench --backend cuda --shape all --m 1024,4096 --scheme fp8 --json $W/${v}_$rep.json > $W/${v}_$rep.md 2>$W/${v}_$rep.err; echo "$v $rep rc $? $(el)"
  done
done
for v in probe1 probe2; do python3 bench/compare_rows.py "$W/base_*.json" "$W/${v}_*.json" > $W/compare_$v.txt 2>&1; echo "== base vs $v"; grep -v '^|---' $W/compare_$v.txt | cut -c1-60; done
for sc in fp8 bf16; do
  timeout 150 ncu --clock-control none -k 'regex:sm90_moe' -c 1 --section WarpStateStats --section SourceCounters --section SpeedOfLight -o $W/stall_$sc $B/qmoe_base bench --backend cuda --shape mixtral-8x7b --m 4096 --scheme $sc --iters 1 --warmup 0 --settle-ms 0 > $W/ncu_run_$sc.txt 2>&1; echo "ncu $sc rc $? $(el)"
  ncu -i $W/stall_$sc.ncu-rep --page details > $W/stall_${sc}_details.txt 2>&1
  ncu -i $W/stall_$sc.ncu-rep --page source --csv --print-source sass > $W/stall_${sc}_sass.csv 2>&1; echo "export $sc rc $? $(wc -c < $W/stall_${sc}_sass.csv) $(el)"
  grep -E "Stall|Warp Cycles" $W/stall_${sc}_details.txt | head -30 | cut -c1-130
  xz -9 $W/stall_${sc}_sass.csv; rm -f $W/stall_$sc.ncu-rep
done
cd $OUT && tar czf r2.tgz r2
