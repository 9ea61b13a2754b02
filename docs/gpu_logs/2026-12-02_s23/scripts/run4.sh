#!/usr/bin/env bash
# session 23, call 4: A rows from x in two copy forms (QMOE_CUDA_A_DIRECT=1: a row per producer
# thread, 2: 8 threads per row, whole sectors) and the rule (form 1 up to 64 rows per expert).
# Their test first (stop on failure); A/B over bf16 x every shape x M = 256 / 1024 / 4096: gather (0),
# form 1 everywhere, form 2 everywhere, the rule, alternating twice; the whole suite with form 2
# forced everywhere; C ABI / Python; the anchor rows.
B=build-gpu-carry; W=$OUT/r4; mkdir -p $W
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; fi
done
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
Q=$B/qmoe
timeout 150 $B/test_cuda --gtest_brief=1 --gtest_filter='CudaSm90.DirectARows*:CudaAlign.*' > $W/test_first.log 2>&1; rc=$?; echo "first tests rc $rc $(el)"; tail -3 $W/test_first.log; grep -B2 -A8 "Failure" $W/test_first.log | head -30
if [ $rc != 0 ]; then cd $OUT && tar czf r4.tgz r4; exit 1; fi
for rep in 1 2; do
  for v in 0 1 2 rule; do
    e=QMOE_CUDA_A_DIRECT=$v; [ $v = rule ] && e=QMOE_X=1
    env $e timeout 60 $Q bench --backend cuda --shape all --m 256,1024,4096 --scheme bf16 --json $W/d${v}_$rep.json > $W/d${v}_$rep.md 2>$W/d${v}_$rep.err; echo "$v $rep rc $? $(el)"
  done
done
for v in 1 2 rule; do python3 bench/compare_rows.py "$W/d0_*.json" "$W/d${v}_*.json" > $W/compare_$v.txt 2>&1; echo "== gather vs $v"; grep -v '^|---' $W/compare_$v.txt | cut -c1-110; done
python3 bench/compare_rows.py "$W/d1_*.json" "$W/d2_*.json" > $W/compare_1_2.txt 2>&1; echo "== form 1 vs 2"; grep -v '^|---' $W/compare_1_2.txt | cut -c1-110
QMOE_CUDA_A_DIRECT=2 timeout 240 $B/test_cuda --gtest_brief=1 > $W/test_form2.log 2>&1; echo "test_cuda (form 2 everywhere) rc $? $(el)"; tail -3 $W/test_form2.log; grep -E "^\[  FAILED" $W/test_form2.log | head -20; grep -B2 -A8 "Failure" $W/test_form2.log | head -40
OUT=$W QMOE_GPU_PHASES="capi python" timeout 60 bash scripts/gpu_tests.sh $B $W/gpu_tests.log > $W/gpu_tests.stdout 2>&1; echo "capi/python rc $? $(el)"; grep -E "passed|failed|PASSED|FAILED|rc " $W/gpu_tests.log | tail -6
timeout 150 $Q bench --backend cuda --shape all --m 1,16,64,256,1024,4096 --scheme bf16,fp8,int4,w8a8-int8 --json $W/anchors.json > $W/anchors.md 2>$W/anchors.err; echo "anchor rows rc $? $(el)"
python3 bench/perf_table.py $W/anchors.json 2>&1 | grep -E "^- " | head -8
cd $OUT && tar czf r4.tgz r4
