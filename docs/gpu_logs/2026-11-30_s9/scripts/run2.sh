#!/usr/bin/env bash
# session 9, call 2: A-tile multicast in clusters of two (sm90_moe_gemm_kernel): tests with and
# without clusters, A/B (QMOE_CUDA_CLUSTER=0 vs default), benches, ncu L2 throughput.
B=build-gpu-carry; W=$OUT/r2; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
timeout 60 $B/test_cuda --gtest_filter='CudaSm90*' --gtest_brief=1 > $W/test_sm90.log 2>&1; echo "sm90 tests rc $? $(el)"; tail -3 $W/test_sm90.log
P="--backend cuda --shape all --m 256,1024,4096 --scheme bf16,fp8,w8a8-int8"
for r in 1 2; do
  QMOE_CUDA_CLUSTER=0 timeout 60 $B/qmoe bench $P --json $W/ab_off_$r.json > /dev/null 2>$W/ab_off_$r.err; echo "off $r rc $? $(el)"
  timeout 60 $B/qmoe bench $P --json $W/ab_on_$r.json > /dev/null 2>$W/ab_on_$r.err; echo "on $r rc $? $(el)"
done
NCU="ncu --clock-control none -k regex:sm90_moe -c 2 --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats"
for c in "qwen3-30b-a3b 4096 fp8" "deepseek-v3 4096 fp8" "qwen3-30b-a3b 4096 bf16"; do
  set -- $c
  timeout 90 $NCU $B/qmoe bench --backend cuda --shape $1 --m $2 --scheme $3 --iters 1 --warmup 0 > $W/ncu_$1_$2_$3.txt 2>&1; echo "ncu $c rc $? $(el)"
done
timeout 240 $B/test_cuda --gtest_brief=1 > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log
QMOE_CUDA_CLUSTER=0 timeout 60 $B/test_cuda --gtest_filter='CudaSm90*' --gtest_brief=1 > $W/test_sm90_off.log 2>&1; echo "sm90 tests (no clusters) rc $? $(el)"; tail -3 $W/test_sm90_off.log
(dmesg 2>&1 | grep -i "xid\|nvrm" | tail -20) > $W/dmesg.txt
cd $OUT && tar czf r2.tgz r2
