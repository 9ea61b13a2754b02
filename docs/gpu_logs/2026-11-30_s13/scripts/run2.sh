#!/usr/bin/env bash
# session 13, call 2: int4 group scales folded into the wq kernel's operands (Sm90Gemm::fold) against
# the exact path with fp32 promotion (QMOE_CUDA_WQ_FOLD=0, same binary), int4 g128 at M = 256 / 1024 /
# 4096, two alternating repetitions; int4-ch as the ceiling; the whole CUDA test suite, C ABI, Python.
B=build-gpu-carry; W=$OUT/r2; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
timeout 100 $B/test_cuda --gtest_brief=1 --gtest_filter='CudaSm90.Folded*:CudaSm90.Prefill*:CudaSm90.Quantized*' > $W/test_fold.log 2>&1; echo "test fold rc $? $(el)"; tail -3 $W/test_fold.log; grep -E "^\[  FAILED|Failure|NMSE" $W/test_fold.log | head -20
for rep in 1 2; do
  for v in exact fold; do
    f=1; [ $v = exact ] && f=0
    QMOE_CUDA_WQ_FOLD=$f timeout 90 $B/qmoe bench --backend cuda --shape all --m 256,1024,4096 --scheme int4 --json $W/${v}_$rep.json > $W/${v}_$rep.md 2>$W/${v}_$rep.err; echo "$v $rep rc $? $(el)"
  done
done
timeout 60 $B/qmoe bench --backend cuda --shape all --m 256,1024,4096 --scheme int4-ch --json $W/ch.json > $W/ch.md 2>$W/ch.err; echo "ch rc $? $(el)"
timeout 300 $B/test_cuda --gtest_brief=1 > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log; grep -E "^\[  FAILED" $W/test.log | head -20
OUT=$W QMOE_GPU_PHASES="capi python" timeout 150 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "capi/python rc $? $(el)"; grep -E "passed|failed|PASSED|FAILED" $W/gpu_tests.log | tail -4
cd $OUT && tar czf r2.tgz r2
