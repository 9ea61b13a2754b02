#!/usr/bin/env bash
# session 24, call 6: the session's code as committed (CTA pairs for 16-bit weights on 128-row
# M-blocks; the TMA-row copy removed). Tests of the changed paths first (stop on failure); A/B of
# the pairs on bf16 x every shape x M = 1024 / 2048 / 4096 (off / the rule, alternating twice); the
# anchor rows; the whole CUDA suite; C ABI / Python.
B=build-gpu-carry; W=$OUT/r6; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
Q=$B/qmoe
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.limit,temperature.gpu --format=csv > $W/gpu.txt 2>&1
timeout 120 $B/test_cuda --gtest_brief=1 --gtest_filter='CudaSm90.CtaPairs*:CudaSm90.DirectARows*:CudaSm90.Persistent*:SelectSm90.*' > $W/test_first.log 2>&1; rc=$?; echo "first tests rc $rc $(el)"; tail -3 $W/test_first.log; grep -B2 -A8 "Failure" $W/test_first.log | head -30
if [ $rc != 0 ]; then cd $OUT && tar czf r6.tgz r6; exit 1; fi
for rep in 1 2; do
  for v in 0 rule; do
    e=QMOE_CUDA_PAIRS=$v; [ $v = rule ] && e=QMOE_X=1
    env $e timeout 40 $Q bench --backend cuda --shape all --m 1024,2048,4096 --scheme bf16 --json $W/p${v}_$rep.json > $W/p${v}_$rep.md 2>$W/p${v}_$rep.err; echo "pairs $v $rep rc $? $(el)"
  done
done
python3 bench/compare_rows.py "$W/p0_*.json" "$W/prule_*.json" > $W/compare.txt 2>&1; grep -v '^|---' $W/compare.txt | cut -c1-80
timeout 160 $Q bench --backend cuda --shape all --m 1,16,64,256,1024,4096 --scheme bf16,fp8,int4,w8a8-int8 --json $W/anchors.json > $W/anchors.md 2>$W/anchors.err; echo "anchor rows rc $? $(el)"
python3 bench/perf_table.py $W/anchors.json 2>&1 | grep -E "^- " | head -8
timeout 240 $B/test_cuda --gtest_brief=1 > $W/test.log 2>&1; echo "test_cuda rc $? $(el)"; tail -3 $W/test.log; grep -E "^\[  FAILED" $W/test.log | head -20; grep -B2 -A8 "Failure" $W/test.log | head -40
OUT=$W QMOE_GPU_PHASES="capi python" timeout 40 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "capi/python rc $? $(el)"; grep -E "passed|failed|PASSED|FAILED|rc " $W/gpu_tests.log | tail -6
cd $OUT && tar czf r6.tgz r6
