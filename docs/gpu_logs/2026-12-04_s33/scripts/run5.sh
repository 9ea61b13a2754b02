#!/usr/bin/env bash
# session 33, call 5 (HEAD 6f410d5's build): the whole CUDA suite, the C ABI and Python phases; ncu:
# the stream kernel's two GEMMs at llama4-scout M = 16 (bf16, fp8: duration, DRAM throughput; both
# rows ~67 us above their floor) and the bulk decode kernel's stall profile at llama4-scout int4 M = 1
# (both GEMMs, after the tiled scales), with the SASS lines of GEMM1.
B=build-gpu-carry; W=$OUT/r5; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
timeout 240 $B/test_cuda --gtest_brief=1 > $W/test_all.log 2>&1; echo "all tests rc $? $(el)"; tail -3 $W/test_all.log; grep -B2 -A8 "Failure" $W/test_all.log | head -30
OUT=$W QMOE_GPU_PHASES="capi python" timeout 90 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "capi/python rc $? $(el)"; grep -E "passed|failed|PASSED|FAILED|rc " $W/gpu_tests.log | tail -6
for sc in bf16 fp8; do
  timeout 100 ncu --clock-control none -k 'regex:sm90_stream' -c 2 --section SpeedOfLight --section LaunchStats \
    $B/qmoe bench --backend cuda --shape llama4-scout --m 16 --scheme $sc --iters 1 --warmup 0 --settle-ms 0 > $W/ncu_stream_$sc.txt 2>&1; echo "ncu stream $sc rc $? $(el)"
  grep -E "sm90_stream|Duration|DRAM Throughput|Memory Throughput|Grid Size" $W/ncu_stream_$sc.txt | head -14
done
timeout 120 ncu --clock-control none -k 'regex:moe_decode90' -c 2 --section WarpStateStats --section SchedulerStats \
  --section Occupancy --section SpeedOfLight --section SourceCounters \
  $B/qmoe bench --backend cuda --shape llama4-scout --m 1 --scheme int4 --iters 1 --warmup 0 --settle-ms 0 > $W/ncu_llama4_m1.txt 2>&1; echo "ncu decode rc $? $(el)"
grep -E "Duration|Issued Ipc|No Eligible|Active Warps Per Scheduler|Eligible Warps|Warp Cycles Per Issued|Stall|DRAM Throughput" $W/ncu_llama4_m1.txt | head -40
timeout 100 ncu --clock-control none -k 'regex:moe_decode90' -c 1 --section SourceCounters --section WarpStateStats --page source --print-source sass --csv \
  $B/qmoe bench --backend cuda --shape llama4-scout --m 1 --scheme int4 --iters 1 --warmup 0 --settle-ms 0 > $W/sass_llama4_m1.csv 2>&1; echo "sass rc $? $(el)"
python3 bench/ncu_sass_hot.py $W/sass_llama4_m1.csv > $W/sass_hot.txt 2>&1; head -40 $W/sass_hot.txt
cd $W && xz -9 sass_*.csv; cd $OUT && tar czf r5.tgz r5
