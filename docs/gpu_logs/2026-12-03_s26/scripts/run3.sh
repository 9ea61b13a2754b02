#!/usr/bin/env bash
# session 26, call 3: fp8 n256 tiles on 64-row M-blocks too (64 x 256, each consumer warpgroup one
# n128 half). Tests of the Hopper paths first (stop on failure); A/B QMOE_CUDA_FP8_WIDE=0 / 1 on fp8
# x every shape x M = 64 / 256 / 1024, alternating twice; the fp8 anchor rows.
B=build-gpu-carry; W=$OUT/r3; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
Q=$B/qmoe
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.limit,temperature.gpu --format=csv > $W/gpu.txt 2>&1
timeout 200 $B/test_cuda --gtest_brief=1 --gtest_filter='CudaSm90.*:CudaMoeEdges.*:SelectSm90.*:AllSchemes/*' > $W/test_first.log 2>&1; rc=$?; echo "first tests rc $rc $(el)"; tail -3 $W/test_first.log; grep -B2 -A8 "Failure" $W/test_first.log | head -30
if [ $rc != 0 ]; then cd $OUT && tar czf r3.tgz r3; exit 1; fi
for rep in 1 2; do
  for v in 0 1; do
    QMOE_CUDA_FP8_WIDE=$v timeout 60 $Q bench --backend cuda --shape all --m 64,256,1024 --scheme fp8 --json $W/w${v}_$rep.json > $W/w${v}_$rep.md 2>$W/w${v}_$rep.err; echo "w$v $rep rc $? $(el)"
  done
done
python3 bench/compare_rows.py "$W/w0_*.json" "$W/w1_*.json" > $W/compare.txt 2>&1; grep -v '^|---' $W/compare.txt | cut -c1-100
timeout 90 $Q bench --backend cuda --shape all --m 1,16,64,256,1024,4096 --scheme fp8 --json $W/anchors_fp8.json > $W/anchors_fp8.md 2>$W/anchors_fp8.err; echo "fp8 anchor rows rc $? $(el)"
python3 bench/perf_table.py $W/anchors_fp8.json 2>&1 | grep -E "^- " | head -4
cd $OUT && tar czf r3.tgz r3
