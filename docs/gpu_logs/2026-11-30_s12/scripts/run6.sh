#!/usr/bin/env bash
# session 12, call 6: validation of 85d64da (full CUDA tests, C ABI, Python), the anchor rows of
# every scheme, and 7a71a00 (qmoe_base) on the wq kernel's rows in the same run.
B=build-gpu-carry; W=$OUT/r6; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
xz -dkf $B/qmoe_base.xz 2>/dev/null || python3 -c 'import lzma,sys; open(sys.argv[2],"wb").write(lzma.open(sys.argv[1]).read())' $B/qmoe_base.xz $B/qmoe_base; chmod +x $B/qmoe_base
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
timeout 240 $B/test_cuda --gtest_brief=1 > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log; grep -E "^\[  FAILED" $W/test.log | head -20
OUT=$W QMOE_GPU_PHASES="capi python" timeout 120 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "capi/python rc $? $(el)"; grep -E "passed|failed|PASSED|FAILED" $W/gpu_tests.log | tail -4
Q="timeout 150 $B/qmoe bench --backend cuda --shape all"
$Q --m 1,16,64,256,1024,4096 --scheme bf16,fp8,int4 --json $W/bench_all.json > $W/bench_all.md 2>$W/bench_all.err; echo "all rc $? $(el)"
$Q --m 1,16,64,256,1024,4096 --scheme nvfp4a16,mxfp4,nvfp4,w4a8-fp8,w8a8-int8 --json $W/b2_all.json > $W/b2_all.md 2>$W/b2_all.err; echo "b2 rc $? $(el)"
timeout 150 $B/qmoe_base bench --backend cuda --shape all --m 256,1024,4096 --scheme int4,w4a8-fp8,nvfp4a16,mxfp4,nvfp4 --json $W/base_wq.json > $W/base_wq.md 2>$W/base_wq.err; echo "base rc $? $(el)"
cd $OUT && tar czf r6.tgz r6
