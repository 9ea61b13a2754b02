#!/usr/bin/env bash
# session 10, call 1: the ninth session's last commits (b635746) validated (full CUDA tests, C ABI,
# Python), the anchor benches as this session's baseline, the decode kernel's stream without math
# (gpu_ceiling ring: item order x ring depth x blocks per SM), ncu per kernel of decode rows.
B=build-gpu-carry; W=$OUT/r1; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
timeout 60 $B/qmoe_gpu_ceiling ring > $W/ring.md 2>&1; echo "ring rc $? $(el)"
timeout 100 $B/qmoe bench --backend cuda --shape all --m 1,16,64,256,1024,4096 --scheme bf16,fp8,int4 --json $W/bench_all.json > $W/bench_all.md 2>$W/bench_all.err; echo "bench_all rc $? $(el)"
timeout 100 $B/qmoe bench --backend cuda --shape all --m 1,16,64,256,1024,4096 --scheme nvfp4a16,mxfp4,nvfp4,w4a8-fp8,w8a8-int8 --json $W/b2_all.json > $W/b2_all.md 2>$W/b2_all.err; echo "b2 rc $? $(el)"
NCU="ncu --clock-control none -k regex:align|moe_|reduce|act_|decode -c 8 --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size,sm__warps_active.avg.pct_of_peak_sustained_active"
for c in "mixtral-8x7b 16 bf16" "qwen3-30b-a3b 1 bf16" "llama4-scout 16 fp8" "qwen3-30b-a3b 16 fp8" "gpt-oss-120b 64 bf16"; do
  set -- $c
  timeout 60 $NCU $B/qmoe bench --backend cuda --shape $1 --m $2 --scheme $3 --iters 1 --warmup 0 > $W/ncu_$1_$2_$3.txt 2>&1; echo "ncu $c rc $? $(el)"
done
timeout 200 $B/test_cuda --gtest_brief=1 > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log
OUT=$W QMOE_GPU_PHASES="capi python" timeout 100 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "capi/python rc $? $(el)"; grep -E "passed|failed|PASSED|FAILED" $W/gpu_tests.log | tail -4
(dmesg 2>&1 | grep -i "xid\|nvrm" | tail -20) > $W/dmesg.txt
cd $OUT && tar czf r1.tgz r1
