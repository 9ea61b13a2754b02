#!/usr/bin/env bash
# session 10, call 10: the streaming kernel on by its rule; full CUDA tests, C ABI, Python; the
# anchor benches (settled); the rule's rows A/B against QMOE_CUDA_STREAM=0 in the same process order.
B=build-gpu-carry; W=$OUT/r10; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
timeout 250 $B/test_cuda --gtest_brief=1 > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log; grep -E "FAILED|Failure" $W/test.log | head
OUT=$W QMOE_GPU_PHASES="capi python" timeout 100 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "capi/python rc $? $(el)"; grep -E "passed|failed|PASSED|FAILED" $W/gpu_tests.log | tail -4
timeout 120 $B/qmoe bench --backend cuda --shape all --m 1,16,64,256,1024,4096 --scheme bf16,fp8,int4 --json $W/bench_all.json > $W/bench_all.md 2>$W/bench_all.err; echo "bench_all rc $? $(el)"
for st in 0 d; do
  if [ $st = 0 ]; then export QMOE_CUDA_STREAM=0; else unset QMOE_CUDA_STREAM; fi
  timeout 60 $B/qmoe bench --backend cuda --shape llama4-scout,mixtral-8x7b --m 16,64 --scheme bf16,fp8 --json $W/ab_a_$st.json > $W/ab_a_$st.md 2>&1
  timeout 60 $B/qmoe bench --backend cuda --shape deepseek-v3,gpt-oss-120b --m 256 --scheme fp8 --json $W/ab_b_$st.json > $W/ab_b_$st.md 2>&1
done; unset QMOE_CUDA_STREAM; echo "ab $(el)"
timeout 200 $B/qmoe bench --backend cuda --shape all --m 1,16,64,256,1024,4096 --scheme nvfp4a16,mxfp4,nvfp4,w4a8-fp8,w8a8-int8 --json $W/b2_all.json > $W/b2_all.md 2>$W/b2_all.err; echo "b2 rc $? $(el)"
(dmesg 2>&1 | grep -i "xid\|nvrm" | tail -20) > $W/dmesg.txt
cd $OUT && tar czf r10.tgz r10
