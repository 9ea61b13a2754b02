#!/usr/bin/env bash
# session 24, call 5: x's rows by a TMA box per row (Sm90Gemm::a_tma, QMOE_CUDA_A_DIRECT=2; CTA
# pairs multicast half the rows each) and the CTA pairs' rule (16-bit only). Tests first (stop on
# failure); A/B over bf16 x every shape x M = 256 / 1024 / 4096: gather (0), cp.async (1), TMA rows
# (2), TMA rows without pairs, the rule, alternating twice; the whole CUDA suite; C ABI / Python.
B=build-gpu-carry; W=$OUT/r5; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
Q=$B/qmoe
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.limit,temperature.gpu --format=csv > $W/gpu.txt 2>&1
timeout 200 $B/test_cuda --gtest_brief=1 --gtest_filter='CudaSm90.CtaPairs*:CudaSm90.DirectARows*:CudaSm90.Persistent*:SelectSm90.*' > $W/test_first.log 2>&1; rc=$?; echo "first tests rc $rc $(el)"; tail -3 $W/test_first.log; grep -B2 -A8 "Failure" $W/test_first.log | head -30
if [ $rc != 0 ]; then cd $OUT && tar czf r5.tgz r5; exit 1; fi
for rep in 1 2; do
  for v in g c t tn rule; do
    case $v in g) e="QMOE_CUDA_A_DIRECT=0";; c) e="QMOE_CUDA_A_DIRECT=1";; t) e="QMOE_CUDA_A_DIRECT=2";; tn) e="QMOE_CUDA_A_DIRECT=2 QMOE_CUDA_PAIRS=0";; rule) e="QMOE_X=1";; esac
    env $e timeout 60 $Q bench --backend cuda --shape all --m 256,1024,4096 --scheme bf16 --json $W/${v}_$rep.json > $W/${v}_$rep.md 2>$W/${v}_$rep.err; echo "$v $rep rc $? $(el)"
  done
done
for v in c t tn rule; do python3 bench/compare_rows.py "$W/g_*.json" "$W/${v}_*.json" > $W/compare_$v.txt 2>&1; echo "== gather vs $v"; grep -v '^|---' $W/compare_$v.txt | cut -c1-80; done
timeout 260 $B/test_cuda --gtest_brief=1 > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log; grep -E "^\[  FAILED" $W/test.log | head -20; grep -B2 -A8 "Failure" $W/test.log | head -40
OUT=$W QMOE_GPU_PHASES="capi python" timeout 60 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "capi/python rc $? $(el)"; grep -E "passed|failed|PASSED|FAILED|rc " $W/gpu_tests.log | tail -6
cd $OUT && tar czf r5.tgz r5
