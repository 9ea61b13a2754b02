#!/usr/bin/env bash
# session 29, call 3: the final code's CPU changes (one team, cost-bounded job runs, the AVX-512
# activation) on the GPU machine's CPU (16 threads, another ISA mix): test_cpu; then the C ABI and
# Python phases (NumPy CPU tests + torch CUDA tests) and the CUDA decode / selection tests.
B=build-gpu-carry; W=$OUT/r3; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
lscpu | grep -E "Model name|^CPU\(s\)|Flags" | cut -c1-300 > $W/cpu.txt
timeout 120 $B/test_cpu --gtest_brief=1 > $W/test_cpu.log 2>&1; echo "test_cpu rc $? $(el)"; tail -3 $W/test_cpu.log; grep "act_row" $W/test_cpu.log; grep -B2 -A8 "Failure" $W/test_cpu.log | head -30
timeout 120 $B/test_cuda --gtest_brief=1 --gtest_filter='Select*:CudaDecode*:CudaLayer*' > $W/test_cuda.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test_cuda.log
OUT=$W QMOE_GPU_PHASES="capi python" timeout 60 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "capi/python rc $? $(el)"; grep -E "passed|failed|PASSED|FAILED|rc " $W/gpu_tests.log | tail -6
timeout 60 $B/qmoe bench --backend cpu --shape qwen3-30b-a3b --m 1,32,128 --scheme int4-g32,bf16 --iters 5 > $W/cpu_bench.md 2>$W/cpu_bench.err; echo "cpu bench rc $? $(el)"; grep "| q" $W/cpu_bench.md | cut -c1-120
cd $OUT && tar czf r3.tgz r3
