#!/usr/bin/env bash
# session 9, call 6: 8f5ca29 (epilogue fix, half tail, select_sm90 from 16 rows with <= 16 experts):
# full CUDA tests, C ABI, Python, the anchor benches (backend I and II), per-kernel times.
B=build-gpu-carry; W=$OUT/r6; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
timeout 100 $B/qmoe bench --backend cuda --shape all --m 1,16,64,256,1024,4096 --scheme bf16,fp8,int4 --json $W/bench_all.json > $W/bench_all.md 2>$W/bench_all.err; echo "bench_all rc $? $(el)"
timeout 100 $B/qmoe bench --backend cuda --shape all --m 1,16,64,256,1024,4096 --scheme nvfp4a16,mxfp4,nvfp4,w4a8-fp8,w8a8-int8 --json $W/b2_all.json > $W/b2_all.md 2>$W/b2_all.err; echo "b2 rc $? $(el)"
timeout 100 $B/qmoe bench --backend cuda --shape all --m 1,16,64,256,1024,4096 --scheme bf16,fp8,int4 --json $W/bench_all2.json > $W/bench_all2.md 2>$W/bench_all2.err; echo "bench_all2 rc $? $(el)"
for c in "qwen3-30b-a3b 4096 fp8" "qwen3-30b-a3b 4096 bf16" "deepseek-v3 4096 fp8" "qwen3-30b-a3b 1 bf16" "mixtral-8x7b 16 bf16" "qwen3-30b-a3b 1024 int4"; do
  set -- $c
  timeout 60 ncu --clock-control none -k 'regex:align|sm90_moe|sm90_gather|reduce|act_|moe_|route|decode' -c 12 --metrics gpu__time_duration.sum,dram__bytes_read.sum $B/qmoe bench --backend cuda --shape $1 --m $2 --scheme $3 --iters 1 --warmup 0 > $W/k_$1_$2_$3.txt 2>&1; echo "ncu $c rc $? $(el)"
done
timeout 240 $B/test_cuda --gtest_brief=1 > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log
OUT=$W QMOE_GPU_PHASES="capi python" timeout 150 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "capi/python rc $? $(el)"; grep -E "passed|failed|PASSED|FAILED" $W/gpu_tests.log | tail -4
(dmesg 2>&1 | grep -i "xid\|nvrm" | tail -20) > $W/dmesg.txt
cd $OUT && tar czf r6.tgz r6
