#!/usr/bin/env bash
# session 25, call 1: the fp8 tile kernel's software-pipelined promotion (QMOE_SM90_FP8_PIPE=1:
# each 128-k block's QGMMAs a commit group of their own, a block's partials promoted while the
# next block's group runs). Tests of the Hopper paths first (stop on failure); A/B against the
# serial build (qmoe_serial: -DQMOE_SM90_FP8_PIPE=0) on fp8 / fp8-block x every shape x
# M = 256 / 1024 / 4096, alternating twice; ncu of both on mixtral-8x7b fp8 M = 4096.
B=build-gpu-carry; W=$OUT/r1; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.limit,temperature.gpu --format=csv > $W/gpu.txt 2>&1
timeout 150 $B/test_cuda --gtest_brief=1 --gtest_filter='CudaSm90.*:CudaMoeEdges.*:SelectSm90.*' > $W/test_first.log 2>&1; rc=$?; echo "first tests rc $rc $(el)"; tail -3 $W/test_first.log; grep -B2 -A8 "Failure" $W/test_first.log | head -30
if [ $rc != 0 ]; then cd $OUT && tar czf r1.tgz r1; exit 1; fi
for rep in 1 2; do
  for v in serial pipe; do
    Q=$B/qmoe; [ $v = serial ] && Q=$B/qmoe_serial
    timeout 80 $Q bench --backend cuda --shape all --m 256,1024,4096 --scheme fp8,fp8-block --json $W/${v}_$rep.json > $W/${v}_$rep.md 2>$W/${v}_$rep.err; echo "$v $rep rc $? $(el)"
  done
done
python3 bench/compare_rows.py "$W/serial_*.json" "$W/pipe_*.json" > $W/compare.txt 2>&1; grep -v '^|---' $W/compare.txt | cut -c1-80
for v in serial pipe; do
  Q=$B/qmoe; [ $v = serial ] && Q=$B/qmoe_serial
  timeout 60 ncu --clock-control none -k 'regex:sm90_moe' -c 2 --section SpeedOfLight --section SchedulerStats --metrics gpu__time_duration.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_lsu.sum $Q bench --backend cuda --shape mixtral-8x7b --m 4096 --scheme fp8 --iters 1 --warmup 0 --settle-ms 0 > $W/ncu_fp8_mixtral_4096_$v.txt 2>&1; echo "ncu $v rc $? $(el)"
  grep -E "duration|tensor_op|Issue Slots Busy|No Eligible" $W/ncu_fp8_mixtral_4096_$v.txt | cut -c1-140 | head -8
done
cd $OUT && tar czf r1.tgz r1
