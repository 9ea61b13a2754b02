#!/usr/bin/env bash
# session 9, call 4: branch-free activation epilogues (with_act, __fdividef) and GEMM2 slots /
# router weights loaded before the mainloop: full tests, per-CTA timelines (trace2), A/B against
# base2 (4ddfddc's sm90_moe_gemm.cu), C ABI and Python tests.
B=build-gpu-carry; W=$OUT/r4; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
for v in trace2 base2; do python3 -c 'import lzma,sys; open(sys.argv[2],"wb").write(lzma.open(sys.argv[1]).read())' $B/qmoe_$v.xz $B/qmoe_$v && chmod +x $B/qmoe_$v; done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
for c in "qwen3-30b-a3b 4096 fp8" "qwen3-30b-a3b 4096 bf16" "deepseek-v3 4096 fp8" "mixtral-8x7b 4096 bf16" "qwen3-30b-a3b 1024 fp8" "gpt-oss-120b 4096 fp8" "qwen3-30b-a3b 4096 int4" "gpt-oss-120b 4096 mxfp4"; do
  set -- $c
  QMOE_SM90_TRACE_FILE=$W/trace_$1_$2_$3.txt timeout 30 $B/qmoe_trace2 bench --backend cuda --shape $1 --m $2 --scheme $3 > /dev/null 2>$W/trace_$1_$2_$3.err; echo "trace $c rc $? $(el)"
done
P="--backend cuda --shape all --m 256,1024,4096 --scheme bf16,fp8,w8a8-int8,int4,mxfp4"
for r in 1 2; do
  timeout 80 $B/qmoe_base2 bench $P --json $W/ab_base_$r.json > /dev/null 2>$W/ab_base_$r.err; echo "base $r rc $? $(el)"
  timeout 80 $B/qmoe bench $P --json $W/ab_new_$r.json > /dev/null 2>$W/ab_new_$r.err; echo "new $r rc $? $(el)"
done
timeout 240 $B/test_cuda --gtest_brief=1 > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log
OUT=$W QMOE_GPU_PHASES="capi python" timeout 150 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "capi/python rc $? $(el)"; grep -E "passed|failed|PASSED|FAILED" $W/gpu_tests.log | tail -4
(dmesg 2>&1 | grep -i "xid\|nvrm" | tail -20) > $W/dmesg.txt
cd $OUT && tar czf r4.tgz r4
